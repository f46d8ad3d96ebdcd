"""numba's Mandelbrot example, ported to ``@jit`` by changing the decorator only.

Run: ``python examples/jit_mandelbrot.py``
"""

from __future__ import annotations

import numpy as np

from pymlirjit import jit


@jit
def mandel(x, y, max_iters):
    """How many iterations z = z*z + c takes to leave the radius-2 disk (or max_iters)."""
    c = complex(x, y)
    z = 0.0j
    for i in range(max_iters):
        z = z * z + c
        if (z.real * z.real + z.imag * z.imag) >= 4:
            return i
    return max_iters


@jit
def create_fractal(min_x, max_x, min_y, max_y, image, iters):
    height, width = image.shape
    pixel_x = (max_x - min_x) / width
    pixel_y = (max_y - min_y) / height
    for x in range(width):
        real = min_x + x * pixel_x
        for y in range(height):
            imag = min_y + y * pixel_y
            image[y, x] = mandel(real, imag, iters)


def main() -> None:
    image = np.zeros((60, 90), dtype=np.uint8)
    create_fractal(-2.0, 1.0, -1.0, 1.0, image, 20)
    expected = np.zeros_like(image)
    create_fractal.py_func(-2.0, 1.0, -1.0, 1.0, expected, 20)  # plain Python, same code
    assert np.array_equal(image, expected)
    assert image.max() == 20 and image.min() < 5
    for row in image[::6, ::3]:
        print("".join(" .:-=+*#%@"[min(int(v) // 2, 9)] for v in row))
    print("OK")


if __name__ == "__main__":
    main()

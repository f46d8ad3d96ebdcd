// @main(x, k) = cli_scale(x, k), a callback defined in cli_callbacks.py.
func.func @main(%x: f32, %k: i32) -> f32 {
  %r = call @cli_scale(%x, %k) : (f32, i32) -> f32
  return %r : f32
}
func.func private @cli_scale(f32, i32) -> f32

"""fork() while another thread compiles: the fork waits for the builds in flight, so
children never inherit a compile's locks (2-3 of 10 children hung). Children in child
processes, with timeouts."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time

from pymlirjit.boundary.buildgate import building, builds_in_flight


def run_python(code: str) -> str:
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c",
                           textwrap.dedent(code)], capture_output=True, text=True,
                          timeout=240, env=dict(os.environ))
    assert done.returncode == 0, f"exit {done.returncode}\n{done.stdout}\n{done.stderr}"
    return done.stdout


def test_children_forked_while_another_thread_compiles_can_compile() -> None:
    stdout = run_python("""
        import os, threading, time
        from pymlirjit import Session

        SOURCE = '''
        func.func @k%d(%%x: f64) -> f64 {
          %%r = arith.mulf %%x, %%x : f64
          return %%r : f64
        }'''
        Session().compile(SOURCE % 0).k0(1.0)  # MLIR and llvmlite loaded
        stop = False

        def compiler():  # compiles, builds native entries, frees engines, again and again
            i = 1
            while not stop:
                Session().compile(SOURCE % i)[f"k{i}"](2.0)
                i += 1

        thread = threading.Thread(target=compiler)
        thread.start()
        outcomes = []
        try:
            for n in range(10):
                time.sleep(0.02)
                pid = os.fork()
                if pid == 0:
                    try:
                        ok = Session().compile(SOURCE % 1000).k1000(3.0) == 9.0
                    finally:
                        os._exit(0 if ok else 3)
                deadline = time.monotonic() + 60
                while True:
                    done, status = os.waitpid(pid, os.WNOHANG)
                    if done:
                        outcomes.append(status)
                        break
                    if time.monotonic() > deadline:
                        os.kill(pid, 9)
                        os.waitpid(pid, 0)
                        outcomes.append("hung")
                        break
                    time.sleep(0.01)
        finally:
            stop = True
            thread.join()
        print(outcomes)
    """)
    assert stdout.strip() == str([0] * 10)


def test_a_fork_waits_for_a_build_in_flight_and_not_for_its_own() -> None:
    events: list[str] = []
    entered = threading.Event()

    def build() -> None:
        with building():
            entered.set()
            time.sleep(0.2)
            events.append("built")

    thread = threading.Thread(target=build)
    thread.start()
    entered.wait()
    assert builds_in_flight() == 1
    with building():  # the forking thread's own build: not waited for
        pid = os.fork()
        if pid == 0:
            with building():  # the child builds freely
                pass
            os._exit(0 if builds_in_flight() == 1 else 3)
        events.append("forked")
    _, status = os.waitpid(pid, 0)
    thread.join()
    assert status == 0
    assert events == ["built", "forked"]
    assert builds_in_flight() == 0

// Calls @cli_fail, a callback that raises ValueError.
func.func @main(%x: f64) -> f64 {
  %r = call @cli_fail(%x) : (f64) -> f64
  return %r : f64
}
func.func private @cli_fail(f64) -> f64

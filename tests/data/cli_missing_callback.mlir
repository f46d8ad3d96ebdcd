// Declares @cli_nowhere, which no callback and no shared library defines.
func.func @main() {
  call @cli_nowhere() : () -> ()
  return
}
func.func private @cli_nowhere()

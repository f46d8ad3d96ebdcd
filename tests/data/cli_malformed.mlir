// %b is never defined: parsing fails at line 3, column 23.
func.func @main(%a: f32) -> f32 {
  %r = arith.addf %a, %b : f32
  return %r : f32
}

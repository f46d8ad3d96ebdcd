func.func @main() {
  %c = arith.constant 42 : i32
  %token, %value = async.execute -> !async.value<i32> {
    %x = arith.addi %c, %c : i32
    async.yield %x : i32
  }
  %v = async.await %value : !async.value<i32>
  vector.print %v : i32
  %one = arith.constant 1 : index
  %g = async.create_group %one : !async.group
  %t2 = async.execute { async.yield }
  %i = async.add_to_group %t2, %g : !async.token
  async.await_all %g
  return
}

// Loaded into the conformance suite's Node process (`node --require`): every
// server it starts listens on 127.0.0.1, not on every interface (its
// client-scenario servers call `listen(0)`, which binds `::`). The bind
// itself is redirected, so `listen` stays synchronous and `address()` is
// right at once, as the scenarios expect.
const { TCP } = process.binding("tcp_wrap");

const bind6 = TCP.prototype.bind6;
TCP.prototype.bind6 = function (address, port, flags) {
  if (address === "::") {
    return this.bind("127.0.0.1", port);
  }
  return bind6.call(this, address, port, flags);
};
const bind = TCP.prototype.bind;
TCP.prototype.bind = function (address, port) {
  return bind.call(this, address === "0.0.0.0" ? "127.0.0.1" : address, port);
};

// Package egress owns a sandboxed tool's way out under network: allow: the
// allow-list proxy on the host side (StartNetProxy, NetProxy: HTTP and
// CONNECT to allowed host:port only, every refusal counted and named) and
// net-init inside the sandbox (CmdNetInit: the proxy's port and the allowed
// loopback destinations forwarded to the proxy's socket, then the tool),
// with the argv and environment that put the tool behind them (NetInitArgs,
// ProxyEnv, ProxyPort, LoopbackForwards).
//
// It does not decide whether the tool is sandboxed or what the allow list
// is (the sandbox plan does) and knows nothing of task directories beyond
// the names of its socket files. It imports internal/netallow.
package egress

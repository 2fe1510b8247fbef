#pragma once
// Whether the client of a request is still connected. cpp-httplib 0.11 hands a handler no socket
// and notices a closed connection only when a write fails, which a request waiting for its image
// never does; so the socket is found by its addresses (the ones httplib puts in the Request) and
// polled: a peer that closed reads as end-of-file. This is how a client that disconnects cancels
// its request at the next denoising step.
#include <string>

namespace fluxrt::server {

class ClientConnection {
 public:
  // The socket connected from remote_addr:remote_port to local_port; -1 when none is found
  // (then closed() is always false).
  ClientConnection(const std::string& remote_addr, int remote_port, int local_port);
  // True once the peer has closed or reset the connection. Bytes it sent (a pipelined request)
  // are left unread.
  bool closed() const;
  int fd() const { return fd_; }

 private:
  int fd_ = -1;
};

}  // namespace fluxrt::server

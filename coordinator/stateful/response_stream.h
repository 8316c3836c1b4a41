// The events of a streamed response (docs/stateful_apis.md section 6): each is
// `event: TYPE` and its JSON with type and sequence_number (counted from 0);
// there is no [DONE]. The reply message is announced with its first text no
// function call can start in; the calls, at the end, as function_call items.
// Not streamed (no exchange), it sends nothing but still knows whether the
// message was shown, so that both ways make the same output.
#pragma once

#include <cstdint>
#include <string>

#include "coordinator/http/http_server.h"
#include "coordinator/stateful/function_tools.h"

namespace shardlm {
namespace stateful {

class ResponseStream {
 public:
  // `exchange` null: not streamed.
  ResponseStream(HttpExchange* exchange, const FunctionTools& tools, std::string message_id);

  // The stream's start: response.created and response.in_progress with `object`.
  void Start(const Json& object);
  // A piece of the reply's text: a delta of what no call can start in.
  void OnText(const std::string& piece);
  // Whether any of the reply's text was shown (the message must then be in the output).
  bool message_shown() const { return announced_; }
  // Each output item's closing events (a function call's whole life), then the terminal event
  // with `object`; ends the stream.
  void Finish(const Json& output, const Json& object);

 private:
  void Send(const std::string& type, Json data);
  void AnnounceMessage();
  void FinishMessage(const Json& message);
  void SendCall(const Json& call, size_t index);

  HttpExchange* exchange_;
  StreamedText streamed_;
  std::string message_id_;
  bool announced_ = false;
  bool open_ = true;
  int64_t sequence_ = 0;
};

}  // namespace stateful
}  // namespace shardlm

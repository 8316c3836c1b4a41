#include "coordinator/stateful/response_stream.h"

#include "absl/strings/str_cat.h"
#include "coordinator/stateful/response_objects.h"

namespace shardlm {
namespace stateful {

ResponseStream::ResponseStream(HttpExchange* exchange, const FunctionTools& tools, std::string message_id)
    : exchange_(exchange), streamed_(tools), message_id_(std::move(message_id)) {}

void ResponseStream::Send(const std::string& type, Json data) {
  if (exchange_ == nullptr || !open_) return;
  Json event = Json{{"type", type}, {"sequence_number", sequence_++}};
  for (auto it = data.begin(); it != data.end(); ++it) event[it.key()] = it.value();
  open_ = exchange_->Write(absl::StrCat(
      "event: ", type, "\ndata: ", event.dump(-1, ' ', false, Json::error_handler_t::replace), "\n\n"));
}

void ResponseStream::Start(const Json& object) {
  if (exchange_ == nullptr) return;
  exchange_->BeginStream(200, "text/event-stream", {{"Cache-Control", "no-cache"}});
  Send("response.created", {{"response", object}});
  Send("response.in_progress", {{"response", object}});
}

void ResponseStream::AnnounceMessage() {
  if (announced_) return;
  announced_ = true;
  Send("response.output_item.added",
       {{"output_index", 0}, {"item", OutputMessage(message_id_, "in_progress", "")}});
  Send("response.content_part.added",
       {{"item_id", message_id_},
        {"output_index", 0},
        {"content_index", 0},
        {"part", {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
}

void ResponseStream::OnText(const std::string& piece) {
  const std::string text = streamed_.Take(piece);
  if (text.empty()) return;
  AnnounceMessage();
  Send("response.output_text.delta", {{"item_id", message_id_},
                                      {"output_index", 0},
                                      {"content_index", 0},
                                      {"delta", text},
                                      {"logprobs", Json::array()}});
}

void ResponseStream::FinishMessage(const Json& message) {
  AnnounceMessage();
  const Json part =
      message["content"].empty() ? Json{{"type", "output_text"}, {"text", ""}} : message["content"][0];
  Send("response.output_text.done", {{"item_id", message_id_},
                                     {"output_index", 0},
                                     {"content_index", 0},
                                     {"text", part.value("text", "")},
                                     {"logprobs", Json::array()}});
  Send("response.content_part.done",
       {{"item_id", message_id_}, {"output_index", 0}, {"content_index", 0}, {"part", part}});
  Send("response.output_item.done", {{"output_index", 0}, {"item", message}});
}

void ResponseStream::SendCall(const Json& call, size_t index) {
  Json added = call;
  added["arguments"] = "";
  added["status"] = "in_progress";
  const std::string id = call["id"];
  Send("response.output_item.added", {{"output_index", index}, {"item", added}});
  Send("response.function_call_arguments.delta",
       {{"item_id", id}, {"output_index", index}, {"delta", call["arguments"]}});
  Send("response.function_call_arguments.done",
       {{"item_id", id}, {"output_index", index}, {"name", call["name"]}, {"arguments", call["arguments"]}});
  Send("response.output_item.done", {{"output_index", index}, {"item", call}});
}

void ResponseStream::Finish(const Json& output, const Json& object) {
  if (exchange_ == nullptr) return;
  for (size_t i = 0; i < output.size(); ++i) {
    if (output[i].value("type", "") == "message") {
      FinishMessage(output[i]);
    } else {
      SendCall(output[i], i);
    }
  }
  const std::string status = object["status"];
  Send(status == "completed"    ? "response.completed"
       : status == "incomplete" ? "response.incomplete"
                                : "response.failed",
       {{"response", object}});
  exchange_->EndStream();
}

}  // namespace stateful
}  // namespace shardlm

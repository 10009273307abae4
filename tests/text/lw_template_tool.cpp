// Renders a chat template over conversations for the jinja2 reference check:
//   lw_template_tool <template file> <bos> <eos> <cases.json> <out.json>
// cases.json: [{"messages": [{"role", "content"}...], "add_generation_prompt": bool}, ...]
// out.json: [{"text": ...} or {"error": ...}, ...]
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/chat_template.h"

using json = nlohmann::json;

static std::string slurp(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int main(int argc, char** argv) {
  if (argc != 6) {
    std::cerr << "usage: lw_template_tool <template> <bos> <eos> <cases.json> <out.json>\n";
    return 2;
  }
  try {
    lw::text::ChatTemplate tmpl(slurp(argv[1]), argv[2], argv[3]);
    json cases = json::parse(slurp(argv[4]));
    json out = json::array();
    for (const auto& c : cases) {
      std::vector<lw::text::ChatMessage> msgs;
      for (const auto& m : c.at("messages")) msgs.push_back({m.at("role"), m.at("content")});
      try {
        out.push_back({{"text", tmpl.render(msgs, c.at("add_generation_prompt").get<bool>())}});
      } catch (const std::exception& e) {
        out.push_back({{"error", e.what()}});
      }
    }
    std::ofstream(argv[5], std::ios::binary) << out.dump();
  } catch (const std::exception& e) {
    std::cerr << "lw_template_tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

// Runs lw::text over a batch for the Python reference checks:
//   lw_tokenize_tool hf <tokenizer.json> <in.json> <out.json>
//   lw_tokenize_tool spec <spec.json> <in.json> <out.json>
// in.json: {"texts": [...], "id_seqs": [[...], ...]}; out.json holds, per text, the ids without
// and with BOS and both decodings of those ids, per id sequence both decodings, and whether
// streaming reproduced every decoding.
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "text/stream_decoder.h"
#include "text/tokenizer.h"

using json = nlohmann::json;
using lw::text::Tokenizer;

static json load(const char* path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return json::parse(ss.str());
}

static Tokenizer from_spec_json(const json& j) {
  lw::text::TokenizerSpec s;
  s.kind = j.at("kind") == "llama" ? lw::text::TokenizerKind::kSentencePieceBpe : lw::text::TokenizerKind::kByteLevelBpe;
  s.tokens = j.at("tokens").get<std::vector<std::string>>();
  s.token_types = j.value("token_types", std::vector<int32_t>{});
  s.scores = j.value("scores", std::vector<float>{});
  s.merges = j.value("merges", std::vector<std::string>{});
  s.pre = j.value("pre", std::string("default"));
  s.bos_id = j.value("bos_id", -1);
  s.eos_id = j.value("eos_id", -1);
  s.unk_id = j.value("unk_id", -1);
  s.add_bos = j.value("add_bos", false);
  s.add_space_prefix = j.value("add_space_prefix", true);
  return Tokenizer::from_spec(s);
}

int main(int argc, char** argv) {
  if (argc != 5) {
    std::cerr << "usage: lw_tokenize_tool hf|spec <tokenizer> <in.json> <out.json>\n";
    return 2;
  }
  try {
    std::string mode = argv[1];
    Tokenizer tok = mode == "hf" ? Tokenizer::from_hf(argv[2]) : from_spec_json(load(argv[2]));
    json in = load(argv[3]);
    json out;
    bool stream_ok = true;
    auto decode_both = [&](const std::vector<int32_t>& ids, json& dec, json& dec_skip) {
      for (bool skip : {false, true}) {
        std::string d = tok.decode(ids, skip);
        lw::text::StreamDecoder sd(tok, skip);
        std::string s;
        for (int32_t id : ids) s += sd.push(id);
        s += sd.finish();
        if (s != d) stream_ok = false;
        (skip ? dec_skip : dec).push_back(d);
      }
    };
    out["enc"] = json::array();
    out["enc_bos"] = json::array();
    out["dec"] = json::array();
    out["dec_skip"] = json::array();
    for (const auto& t : in.at("texts")) {
      std::string text = t.get<std::string>();
      auto ids = tok.encode(text, false);
      out["enc"].push_back(ids);
      out["enc_bos"].push_back(tok.encode(text, true));
      decode_both(ids, out["dec"], out["dec_skip"]);
    }
    out["rand_dec"] = json::array();
    out["rand_dec_skip"] = json::array();
    for (const auto& seq : in.value("id_seqs", json::array()))
      decode_both(seq.get<std::vector<int32_t>>(), out["rand_dec"], out["rand_dec_skip"]);
    out["stream_ok"] = stream_ok;
    out["vocab_size"] = tok.vocab_size();
    std::ofstream(argv[4], std::ios::binary) << out.dump(-1, ' ', false, json::error_handler_t::strict);
  } catch (const std::exception& e) {
    std::cerr << "lw_tokenize_tool: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

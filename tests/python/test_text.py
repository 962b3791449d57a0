"""Text in, text out (onnx_light.text, `python -m onnx_light generate`): a BPE tokenizer
trained here on a short text (no download) around the exported tiny Llama with its caches
bound. The streamed text is exactly the tokenizer's decoding of the tokens runtime.generate
chooses for the same prompt ids; stop strings cut the text before them (never showing a
part of one); EOS comes from generation_config.json; --chat applies tokenizer_config.json's
template; a model with caches but no bindings is refused with a pointer to `prepare`."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from models import export_hf
from onnx_light import onnx as ol_onnx
from onnx_light.onnx_py._onnxpykernels import runtime
from onnx_light.text import TextGenerator, empty_caches

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TEXT = ("the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat "
        "and the bird sings a song about the sun the moon and the stars ") * 4
PROMPT = "the quick brown fox"


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A directory with model.onnx (bindings added; the weights linked, not copied) and
    tokenizer.json (BPE, 100 tokens: the model's vocabulary is 128)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    out = tmp_path_factory.mktemp("text")
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator([TEXT], trainers.BpeTrainer(
        vocab_size=100, special_tokens=["<unk>", "<s>", "</s>"]))
    tokenizer.save(str(out / "tokenizer.json"))
    source = export_hf.ensure("llama", with_cache=True)
    model = ol_onnx.load_model(source)
    export_hf.add_cache_bindings(model, export_hf.cache_shape("llama")[0])
    ol_onnx.save_model(model, str(out / "model.onnx"))
    data = source + ".data"
    os.symlink(data, out / os.path.basename(data))
    return out


def expected_text(files, max_new_tokens=8):
    """What the tokenizer decodes from the tokens runtime.generate picks (greedy)."""
    gen = TextGenerator(str(files / "model.onnx"), str(files))
    ids = gen.prompt_ids(PROMPT)
    model = ol_onnx.load_model(str(files / "model.onnx"))
    out = runtime.generate(model, gen.context,
                           {"input_ids": np.asarray([ids], np.int64), **empty_caches(model)},
                           runtime.GenerationOptions(max_new_tokens=max_new_tokens))
    tokens = np.from_dlpack(out)[0, len(ids):].tolist()
    return gen.tokenizer.decode(tokens), tokens


def test_streamed_text_is_the_decoding_of_the_generated_tokens(files):
    want, tokens = expected_text(files)
    assert len(tokens) == 8
    gen = TextGenerator(str(files / "model.onnx"), str(files / "tokenizer.json"))
    pieces = list(gen.stream(PROMPT, max_new_tokens=8))
    assert "".join(pieces) == want
    assert len(pieces) >= 2  # streamed token by token, not printed at the end
    stats = gen.last_stats
    assert stats.prompt_tokens == len(gen.prompt_ids(PROMPT))
    assert stats.new_tokens == 8 and stats.stopped_by == "max_new_tokens"
    assert stats.prefill_ms > 0 and stats.decode_tokens_per_s > 0


def test_a_stop_string_ends_the_text_before_it(files):
    want, _ = expected_text(files)
    visible = want.strip()
    assert len(visible) >= 4
    stop = visible[2:4]
    gen = TextGenerator(str(files / "model.onnx"), str(files))
    got = "".join(gen.stream(PROMPT, max_new_tokens=8, stop=(stop,)))
    assert got == want[:want.find(stop)]
    assert stop not in got and gen.last_stats.stopped_by == "stop string"


def test_eos_from_generation_config_stops_generation(files, tmp_path):
    _, tokens = expected_text(files)
    for name in ("model.onnx", "tokenizer.json"):
        os.symlink(files / name, tmp_path / name)
    data = [f for f in os.listdir(files) if f.endswith(".data")][0]
    os.symlink(os.path.realpath(files / data), tmp_path / data)
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [tokens[2]]}))
    gen = TextGenerator(str(tmp_path / "model.onnx"), str(tmp_path))
    got = "".join(gen.stream(PROMPT, max_new_tokens=8))
    assert gen.last_stats.stopped_by == "eos" and gen.last_stats.new_tokens == 2
    assert got == gen.tokenizer.decode(tokens[:2])


def test_chat_applies_the_tokenizer_config_template(files, tmp_path):
    for name in ("model.onnx", "tokenizer.json"):
        os.symlink(files / name, tmp_path / name)
    template = "{% for m in messages %}<s>{{ m['content'] }}{% endfor %}"
    (tmp_path / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    gen = TextGenerator(str(files / "model.onnx"), str(tmp_path))
    ids = gen.prompt_ids(PROMPT, chat=True)
    assert ids == gen.tokenizer.encode("<s>" + PROMPT, add_special_tokens=False).ids
    assert ids[0] == gen.tokenizer.token_to_id("<s>")
    no_template = TextGenerator(str(files / "model.onnx"), str(files))
    with pytest.raises(ValueError, match="no chat template .tokenizer_config.json's "
                                         "chat_template or chat_template.jinja. was found"):
        no_template.prompt_ids(PROMPT, chat=True)


def test_a_model_with_caches_but_no_bindings_is_refused(files, tmp_path):
    source = export_hf.ensure("llama", with_cache=True)
    ol_onnx.save_model(ol_onnx.load_model(source), str(tmp_path / "unbound.onnx"))
    os.symlink(source + ".data", tmp_path / os.path.basename(source + ".data"))
    with pytest.raises(ValueError, match="no persistent_bindings: run `python -m onnx_light "
                                         "prepare` on it first"):
        TextGenerator(str(tmp_path / "unbound.onnx"), str(files))


def test_warm_up_compiles_and_packs_the_session_requests_then_share(files):
    want, _ = expected_text(files)
    gen = TextGenerator(str(files / "model.onnx"), str(files))
    before = runtime.allocator_stats()["weight_packs"]
    assert gen.warm_up() > 0
    packed = runtime.allocator_stats()["weight_packs"] - before
    assert packed > 0
    assert "".join(gen.stream(PROMPT, max_new_tokens=8)) == want  # the same text after it
    assert runtime.allocator_stats()["weight_packs"] - before == packed  # nothing packed again


def test_a_model_folder_runs_its_one_model_and_refuses_an_ambiguous_one(files, tmp_path):
    want, _ = expected_text(files)
    assert "".join(TextGenerator(str(files), str(files)).stream(PROMPT, max_new_tokens=8)) == want
    folder = _linked(files, tmp_path)
    os.symlink(os.path.realpath(files / "model.onnx"), folder / "model.prepared.onnx")
    with pytest.raises(ValueError, match=r"is a directory with several models \(model.onnx, "
                                         r"model.prepared.onnx\): pass one of them"):
        TextGenerator(str(folder), str(files))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(ValueError, match="is a directory with no .onnx file in it"):
        TextGenerator(str(empty), str(files))
    # Below the text layer, loading a directory names it (it used to report 2^63 - 1 bytes).
    with pytest.raises(Exception, match=f"model file '{empty}' is a directory: pass the .onnx "
                                        "file in it"):
        ol_onnx.load_model(str(empty))


def test_the_command_line_streams_text_and_reports_figures(files):
    want, _ = expected_text(files)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "onnx_light", "generate",
                           str(files / "model.onnx"), "--tokenizer", str(files),
                           "--prompt", PROMPT, "--max-new-tokens", "8"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout == want + "\n"
    assert "prompt tokens, prefill" in done.stderr and "tokens/s" in done.stderr
    bad = subprocess.run([sys.executable, "-m", "onnx_light", "generate",
                          str(files / "model.onnx"), "--tokenizer", str(files / "missing"),
                          "--prompt", PROMPT], capture_output=True, text=True, env=env,
                         timeout=300)
    assert bad.returncode == 1 and "no tokenizer.json at" in bad.stderr


def _cache_model(head_dim):
    """A model with one bound cache declared [batch, 2, past, head_dim]."""
    from onnx import TensorProto, helper

    cache = helper.make_tensor_value_info("past", TensorProto.FLOAT,
                                          ["batch", 2, "past_sequence_length", head_dim])
    out = helper.make_tensor_value_info("present", TensorProto.FLOAT, None)
    graph = helper.make_graph([helper.make_node("Identity", ["past"], ["present"])], "g",
                              [cache], [out])
    model = ol_onnx.load_model(
        helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]).SerializeToString())
    binding = model.graph.persistent_bindings.add()
    binding.input_name, binding.output_name = "past", "present"
    return model


def test_an_empty_cache_gets_its_symbolic_head_width_from_the_model_folder(tmp_path):
    from onnx_light.text import read_settings

    (tmp_path / "genai_config.json").write_text(json.dumps(
        {"model": {"decoder": {"head_size": 64}, "context_length": 256}}))
    settings = read_settings(str(tmp_path))
    assert settings.head_size == 64
    assert empty_caches(_cache_model("kv_cache_dim"), settings.head_size)["past"].shape == \
        (1, 2, 0, 64)
    assert empty_caches(_cache_model(32))["past"].shape == (1, 2, 0, 32)
    with pytest.raises(ValueError, match="'past' declares its head dimension as 'kv_cache_dim'"):
        empty_caches(_cache_model("kv_cache_dim"))
    config = tmp_path / "hf"
    config.mkdir()
    (config / "config.json").write_text(json.dumps({"hidden_size": 576,
                                                    "num_attention_heads": 9}))
    assert read_settings(str(config)).head_size == 64


def _linked(files, tmp_path):
    """tmp_path with the model, its data and the tokenizer linked: a folder to add JSON to."""
    for name in os.listdir(files):
        os.symlink(os.path.realpath(files / name), tmp_path / name)
    return tmp_path


def _cli(*args):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.join(REPO, "python"), os.environ.get("PYTHONPATH", "")]))
    return subprocess.run([sys.executable, "-m", "onnx_light", "generate", *map(str, args)],
                          capture_output=True, text=True, env=env, timeout=300)


def test_sampling_options_and_chat_reach_generation_from_the_command_line(files, tmp_path):
    """--temperature/--top-k/--top-p/--seed give the text of runtime.generate's tokens with
    the same options and seed (the same text twice), and --chat the template's prompt."""
    folder = _linked(files, tmp_path)
    template = "{% for m in messages %}<s>{{ m['content'] }} and{% endfor %}"
    (folder / "tokenizer_config.json").write_text(json.dumps({"chat_template": template}))
    gen = TextGenerator(str(folder / "model.onnx"), str(folder))
    sampling = dict(temperature=0.9, top_k=20, top_p=0.9, seed=5)
    for chat in (False, True):
        ids = gen.prompt_ids(PROMPT, chat=chat)
        model = ol_onnx.load_model(str(folder / "model.onnx"))
        out = runtime.generate(model, gen.context,
                               {"input_ids": np.asarray([ids], np.int64), **empty_caches(model)},
                               runtime.GenerationOptions(max_new_tokens=8, **sampling))
        want = gen.tokenizer.decode(np.from_dlpack(out)[0, len(ids):].tolist())
        assert "".join(gen.stream(PROMPT, max_new_tokens=8, chat=chat, **sampling)) == want
        done = _cli(folder / "model.onnx", "--tokenizer", folder, "--prompt", PROMPT,
                    "--max-new-tokens", 8, "--temperature", 0.9, "--top-k", 20, "--top-p", 0.9,
                    "--seed", 5, *(["--chat"] if chat else []))
        assert done.returncode == 0, done.stderr
        assert done.stdout == want + "\n", chat


def test_bos_eos_and_context_length_come_from_genai_config_then_config(files, tmp_path):
    from onnx_light.text import read_settings

    folder = _linked(files, tmp_path)
    (folder / "config.json").write_text(json.dumps(
        {"bos_token_id": 1, "eos_token_id": 2, "max_position_embeddings": 32}))
    settings = read_settings(str(folder))
    assert (settings.bos_token_id, settings.eos_token_ids, settings.context_length) == \
        (1, [2], 32)
    gen = TextGenerator(str(folder / "model.onnx"), str(folder))
    ids = gen.prompt_ids(PROMPT)
    assert ids[0] == 1 and ids[1:] == gen.tokenizer.encode(PROMPT).ids
    # genai_config.json comes first (the onnxruntime-genai builder writes it beside the model).
    (folder / "genai_config.json").write_text(json.dumps(
        {"model": {"bos_token_id": 1, "eos_token_id": [2, 7], "context_length": 64}}))
    settings = read_settings(str(folder))
    assert (settings.bos_token_id, settings.eos_token_ids, settings.context_length) == \
        (1, [2, 7], 64)


def test_a_prompt_or_generation_past_the_context_length_is_refused_naming_it(files, tmp_path):
    folder = _linked(files, tmp_path)
    prompt_tokens = len(TextGenerator(str(folder / "model.onnx"), str(folder)).prompt_ids(PROMPT))
    limit = prompt_tokens + 3
    (folder / "config.json").write_text(json.dumps({"max_position_embeddings": limit}))
    gen = TextGenerator(str(folder / "model.onnx"), str(folder))
    assert len(list(gen.stream(PROMPT, max_new_tokens=3))) >= 1
    assert gen.last_stats.new_tokens == 3
    with pytest.raises(ValueError, match=rf"plus max_new_tokens 8 exceed the model's context "
                                         rf"length of {limit} positions: ask for at most 3"):
        list(gen.stream(PROMPT, max_new_tokens=8))
    done = _cli(folder / "model.onnx", "--tokenizer", folder, "--prompt", PROMPT + " " + PROMPT,
                "--max-new-tokens", 1)
    assert done.returncode == 1 and done.stdout.strip() == ""
    assert f"the model's context length is {limit} positions" in done.stderr


def test_chat_template_saved_by_transformers_as_chat_template_jinja(files, tmp_path):
    """transformers' save_pretrained writes the template to chat_template.jinja (not to
    tokenizer_config.json): --chat finds it there, and a list of named templates in
    tokenizer_config.json gives the one named "default"."""
    import transformers
    from tokenizers import Tokenizer

    folder = _linked(files, tmp_path)
    saved = tmp_path / "saved"
    tokenizer = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_file(str(files / "tokenizer.json")), bos_token="<s>",
        eos_token="</s>")
    tokenizer.chat_template = "{% for m in messages %}{{ bos_token }}{{ m['content'] }}{% endfor %}"
    tokenizer.save_pretrained(str(saved))
    assert (saved / "chat_template.jinja").is_file()
    gen = TextGenerator(str(folder / "model.onnx"), str(saved))
    assert gen.prompt_ids(PROMPT, chat=True) == \
        gen.tokenizer.encode("<s>" + PROMPT, add_special_tokens=False).ids
    (saved / "chat_template.jinja").unlink()
    config = json.loads((saved / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": "tools"},
                               {"name": "default", "template": "{{ messages[0]['content'] }}!"}]
    (saved / "tokenizer_config.json").write_text(json.dumps(config))
    gen = TextGenerator(str(folder / "model.onnx"), str(saved))
    assert gen.apply_chat_template([{"role": "user", "content": PROMPT}]) == PROMPT + "!"

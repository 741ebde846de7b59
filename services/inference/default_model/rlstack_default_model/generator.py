"""Generate the stack's default model offline: a tiny, randomly initialised Qwen3 causal LM.

Deterministic: the same seed and package versions give byte-identical files, in the trainer image
as in the inference images. The tokenizer is a byte-level BPE trained with ``tokenizers`` on a
fixed corpus (the first 24 million characters of the pinned ``transformers`` package's source
files, read in sorted order), with Qwen2's normalizer and pre-tokenizer so that transformers and
vLLM tokenise alike. The chat template is TRL's Qwen3 template, byte for byte (TRL recognises it for
tool calling); the hermes tool-call tags are ordinary (non-special) added tokens, and the embeddings
are untied (vLLM's in-place weight reload does not refresh a tied lm_head).

    python -m rlstack_default_model --out /models/default [--seed 0] [--if-missing]
    python -m rlstack_default_model --out DIR --scripted-tool-call '{"name": "bash", ...}'
    python -m rlstack_default_model --out DIR --choices 0,1,2 \\
        --scripted-tool-call '{"name": "answer", "arguments": {"answer": "{choice}"}}'

``--scripted-tool-call`` makes a test fixture instead: attention and MLP outputs are zeroed so the
next token depends only on the current one, and the lm_head is set so that after any prompt the
model emits exactly ``<tool_call>`` + the given call + ``</tool_call>``, and ends its turn.
"""

import argparse
import hashlib
import importlib.util
import json
from pathlib import Path

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Non-special so they survive skip_special_tokens; vLLM's hermes parser looks for the tool tags.
TOOL_TOKENS = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
# Qwen2's pre-tokenizer split pattern (letters, single digits, punctuation runs, newlines, spaces).
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
    r"\s*[\r\n]+|\s+(?!\S)|\s+"
)
GENERATOR_VERSION = "2"
# transformers 5.17's sources alone pass CORPUS_BYTES, so the corpus needs no other package (the
# trainer image has no vLLM, and makes the same tokenizer as the inference images).
CORPUS_PACKAGES = ("transformers",)
CORPUS_BYTES = 24_000_000
VOCAB_SIZE = 32_000
MAX_POSITION_EMBEDDINGS = 40_960


def trl_qwen3_template() -> str:
    """TRL's Qwen3 chat template, read from the installed trl package without importing it."""
    spec = importlib.util.find_spec("trl")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("default_model: the trl package (for its Qwen3 chat template) is not installed")
    path = Path(list(spec.submodule_search_locations)[0]) / "chat_templates" / "qwen3.jinja"
    return path.read_text(encoding="utf-8")


def corpus(limit_bytes: int = CORPUS_BYTES) -> list[str]:
    """Source files of the corpus packages in a fixed order, up to ``limit_bytes``."""
    texts, total = [], 0
    for package in CORPUS_PACKAGES:
        spec = importlib.util.find_spec(package)
        root = Path(list(spec.submodule_search_locations)[0])
        for path in sorted(root.rglob("*.py"), key=lambda p: p.relative_to(root).as_posix()):
            text = path.read_text(encoding="utf-8", errors="replace")
            texts.append(text)
            total += len(text)
            if total >= limit_bytes:
                return texts
    return texts


def train_tokenizer(vocab_size: int = VOCAB_SIZE):
    """Byte-level BPE with Qwen2's normalizer, pre-tokenizer and decoder, wrapped for transformers."""
    from tokenizers import (
        AddedToken,
        Regex,
        Tokenizer,
        decoders,
        models,
        normalizers,
        pre_tokenizers,
        processors,
        trainers,
    )
    from transformers import PreTrainedTokenizerFast

    tokenizer = Tokenizer(models.BPE(byte_fallback=False))
    tokenizer.normalizer = normalizers.NFC()
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(corpus(), trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        model_max_length=MAX_POSITION_EMBEDDINGS,
    )
    fast.chat_template = trl_qwen3_template()
    return fast


def build_model(tokenizer, seed: int):
    """A randomly initialised Qwen3ForCausalLM sized to the tokenizer (no padded vocabulary)."""
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM

    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    pad = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=384,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        max_position_embeddings=MAX_POSITION_EMBEDDINGS,
        tie_word_embeddings=False,
        bos_token_id=None,
        eos_token_id=im_end,
        pad_token_id=pad,
    )
    torch.manual_seed(seed)
    model = Qwen3ForCausalLM(config).to(torch.float32)
    model.generation_config = GenerationConfig(eos_token_id=[im_end, pad], pad_token_id=pad)
    return model


CHOICE = "{choice}"
EMBED_SCALE = 1000.0


def script_tool_call(model, tokenizer, call: dict, choices: list[str] | None = None) -> None:
    """Make the model emit ``<tool_call>`` + ``call`` + ``</tool_call>`` and end its turn, always.

    With attention and MLP outputs zeroed the hidden state is the current token's embedding, so the
    lm_head alone picks the next token. The call is one added token, so every token of the chain is
    distinct and has one successor. With ``choices``, the string ``{choice}`` in the call is where
    the model samples one of them (each one token, added if it is longer; equally likely at first):
    a toy policy whose only decision is that choice, which RL can then shift.
    """
    import torch

    text = "\n" + json.dumps(call) + "\n"
    parts = text.split(CHOICE) if choices else [text]
    if len(parts) > 2 or (choices and len(parts) != 2):
        raise ValueError(f"with choices the call must contain {CHOICE!r} exactly once")
    tokenizer.add_tokens(parts)
    model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
    model.config.vocab_size = len(tokenizer)
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in ("<tool_call>", "</tool_call>", "<|im_end|>", *parts)}
    choice_ids = []
    for choice in choices or []:
        if json.dumps(choice)[1:-1] != choice:
            raise ValueError(f"choice {choice!r} needs JSON escaping; choices are pasted into the call's JSON as is")
        encoded = tokenizer.encode(choice)
        if len(encoded) != 1:  # a longer text (a whole command) becomes one added token
            tokenizer.add_tokens([choice])
            model.resize_token_embeddings(len(tokenizer), mean_resizing=False)
            model.config.vocab_size = len(tokenizer)
            encoded = tokenizer.encode(choice)
        choice_ids.append(encoded[0])
    # Generation prompts end in "\n" (or "\n\n" after an empty think block); both start the call.
    starts = {tokenizer.encode(s)[-1] for s in ("<|im_start|>assistant\n", "<think>\n\n</think>\n\n")}
    successors: dict[int, list[int]] = {s: [ids["<tool_call>"]] for s in starts}
    successors[ids["<tool_call>"]] = [ids[parts[0]]]
    if choices:
        successors[ids[parts[0]]] = choice_ids
        successors.update({c: [ids[parts[1]]] for c in choice_ids})
    successors[ids[parts[-1]]] = [ids["</tool_call>"]]
    successors[ids["</tool_call>"]] = [ids["<|im_end|>"]]
    hidden = model.config.hidden_size
    if len(successors) > hidden:
        raise ValueError("too many scripted transitions for the hidden size")
    with torch.no_grad():
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight.zero_()
            layer.mlp.down_proj.weight.zero_()
        embed, head = model.model.embed_tokens.weight, model.lm_head.weight
        chain = sorted(successors)
        # Token k of the chain gets basis direction k; only its successors score on that direction.
        head[:, : len(chain)] = 0.0
        head[sorted({n for nexts in successors.values() for n in nexts})] = 0.0
        for k, current in enumerate(chain):
            # Scaled so that what training later adds to the residual stream through the (zeroed, but
            # trainable) attention and MLP stays small next to it; the norm removes the scale itself.
            embed[current] = EMBED_SCALE * torch.nn.functional.one_hot(torch.tensor(k), hidden).float()
            for successor in successors[current]:
                head[successor, k] = 100.0


def file_digests(out: Path) -> dict[str, str]:
    """sha256 of every file the generator wrote (the manifest excluded)."""
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(out.iterdir())
        if p.is_file() and p.name != "rlstack_model.json"
    }


def generate(
    out: Path,
    seed: int,
    scripted_tool_call: dict | None = None,
    tokenizer_from: Path | None = None,
    choices: list[str] | None = None,
) -> dict:
    """Write tokenizer, config and weights to ``out``; returns the manifest.

    ``tokenizer_from`` reuses the tokenizer of an earlier output instead of training it again (the
    training is deterministic, so only time is saved).
    """
    if tokenizer_from is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    else:
        tokenizer = train_tokenizer()
    model = build_model(tokenizer, seed)
    if scripted_tool_call is not None:
        script_tool_call(model, tokenizer, scripted_tool_call, choices)
    out.mkdir(parents=True, exist_ok=True)
    tokenizer.save_pretrained(out)
    # transformers 5 records its own class name, which transformers 4 does not know; both resolve
    # PreTrainedTokenizerFast to a tokenizer that uses tokenizer.json as is.
    config_path = out / "tokenizer_config.json"
    tokenizer_config = json.loads(config_path.read_text())
    tokenizer_config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_path.write_text(json.dumps(tokenizer_config, indent=2, sort_keys=True) + "\n")
    model.save_pretrained(out, safe_serialization=True)
    for path in out.iterdir():
        path.chmod(0o644)  # the trainer and inference containers read it under other uids
    manifest = {
        "generator_version": GENERATOR_VERSION,
        "seed": seed,
        "scripted_tool_call": scripted_tool_call,
        "choices": choices,
        "vocab_size": len(tokenizer),
        "parameters": sum(p.numel() for p in model.parameters()),
        "files": file_digests(out),
    }
    (out / "rlstack_model.json").write_text(json.dumps(manifest, indent=2) + "\n")
    return manifest


def same_model(manifest_path: Path, seed: int, scripted_tool_call: dict | None, choices: list[str] | None) -> bool:
    """Whether ``manifest_path`` describes the model these arguments would generate (same generator version)."""
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return False
    return (
        manifest.get("generator_version"),
        manifest.get("seed"),
        manifest.get("scripted_tool_call"),
        manifest.get("choices"),
    ) == (GENERATOR_VERSION, seed, scripted_tool_call, choices)


def main(argv: list[str] | None = None) -> None:
    """Command line entry point."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="output directory")
    parser.add_argument("--seed", type=int, default=0, help="weight initialisation seed")
    parser.add_argument(
        "--tokenizer-from",
        type=Path,
        default=None,
        metavar="DIR",
        help="reuse the tokenizer of an earlier output instead of training it",
    )
    parser.add_argument(
        "--if-missing", action="store_true", help="do nothing if --out already holds the model these arguments describe"
    )
    parser.add_argument(
        "--scripted-tool-call",
        type=json.loads,
        default=None,
        metavar="JSON",
        help='test fixture: always call this tool, e.g. {"name": "bash", "arguments": {...}}',
    )
    parser.add_argument(
        "--choices",
        type=lambda v: v.split(","),
        default=None,
        metavar="A,B,...",
        help="with --scripted-tool-call: sample one of these where the call says {choice}",
    )
    args = parser.parse_args(argv)
    if args.if_missing and same_model(
        args.out / "rlstack_model.json", args.seed, args.scripted_tool_call, args.choices
    ):
        print(f"default_model: {args.out} already holds this model", flush=True)
        return
    manifest = generate(args.out, args.seed, args.scripted_tool_call, args.tokenizer_from, args.choices)
    print(
        f"default_model: wrote {args.out} (vocab {manifest['vocab_size']}, "
        f"{manifest['parameters']:,} parameters, seed {manifest['seed']})",
        flush=True,
    )

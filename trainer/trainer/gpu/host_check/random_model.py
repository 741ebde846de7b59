"""A random-init model of Qwen3-1.7B's architecture (its ``config.json``, vocabulary 151,936, kept
beside this module) with the embedded model's tokenizer: the walkthrough's shape when Qwen3-1.7B is
not in the local HF cache. A random model never stops early, so every completion runs to
``max_completion_length``: the worst case for memory. ``tiny`` keeps the vocabulary and shrinks the
rest (CI on CPU).

    python -m trainer.gpu.host_check.random_model --tokenizer DIR --out DIR [--shape tiny] [--device cuda]
"""

import argparse
import json
import sys
from pathlib import Path

CONFIG = Path(__file__).with_name("qwen3-1.7b-config.json")
TINY = {
    "hidden_size": 64,
    "intermediate_size": 192,
    "num_hidden_layers": 2,
    "max_window_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
}
# What the check reads back: the shape and the parameter count.
INFO = "host_check_model.json"


def make(tokenizer_dir: Path, out: Path, shape: str, device: str) -> dict:
    """Write the model and the tokenizer to ``out``; returns what ``INFO`` holds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, Qwen3Config

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    fields = json.loads(CONFIG.read_text())
    fields.update(TINY if shape == "tiny" else {})
    fields.update(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.convert_tokens_to_ids("<|im_end|>"),
        pad_token_id=tokenizer.pad_token_id,
    )
    config = Qwen3Config(**{k: v for k, v in fields.items() if k not in ("architectures", "transformers_version")})
    torch.manual_seed(0)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    info = {
        "shape": shape,
        "parameters": sum(p.numel() for p in model.parameters()),
        "vocab_size": config.vocab_size,
        "tokenizer_vocabulary": len(tokenizer),
    }
    (out / INFO).write_text(json.dumps(info))
    return info


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", type=Path, required=True, help="a folder with the tokenizer to use")
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--shape", choices=("qwen3-1.7b", "tiny"), default="qwen3-1.7b")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda", help="where to initialise (faster on GPU)")
    args = parser.parse_args(argv)
    print(json.dumps(make(args.tokenizer, args.out, args.shape, args.device)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

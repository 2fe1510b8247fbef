#!/usr/bin/env bash
# Rebuilds models/demo from nothing (no downloads besides the pinned Python packages): the VAE,
# then the transformer and the Qwen3 text encoder trained jointly in three rounds, then the score
# on 100 held-out prompts. About 100 minutes on a quiet 2-core machine (estimated from measured
# stage times: VAE 17 min, 0.65 s per joint step on 2 threads; not timed end to end). Usage: tools/demo_model/rebuild.sh [work dir]
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
work="${1:-$repo/build/demo_model}"
py="${PYTHON:-python3}"
mkdir -p "$work"
cd "$here"

# 1. VAE (three levels, shape pixels weighted up): its own round trip of the held-out evaluation
#    scenes passes the classifier 99/100.
"$py" train_vae.py --work "$work" --steps 2000 --full-steps 300 --shape-weight 4 --checkpoint-every 500 --threads 2
# 2. Transformer (4 heads) + text encoder (all but its zero query projections), EMA of both exported.
"$py" train_transformer.py --work "$work" --heads 4 --train-text-encoder --schedule-steps "${JOINT_STEPS:-3400}" \
  --export-minutes 10 --threads 2
# 3. Two more joint rounds from the exported EMA, each with a fresh warm-up and cosine at a lower peak
#    and its own data seed (69 -> 77 -> 82/100 on the 100 held-out prompts).
for round in "3000 4e-4 1e-3 3300" "1200 2e-4 5e-4 3400"; do
  read -r steps lr text_lr seed <<< "$round"
  rm -rf "$work/round_input" && cp -r "$work/pipeline" "$work/round_input"
  "$py" train_transformer.py --work "$work" --resume "$work/round_input" --heads 4 --train-text-encoder \
    --schedule-steps "$steps" --lr "$lr" --text-lr "$text_lr" --seed "$seed" --export-minutes 10 --threads 2
done

# 4. Bundle and score.
rm -rf "$repo/models/demo.new" && cp -r "$work/pipeline" "$repo/models/demo.new"
cp "$repo/models/demo/README.md" "$repo/models/demo.new/README.md" 2>/dev/null || true
rm -rf "$repo/models/demo" && mv "$repo/models/demo.new" "$repo/models/demo"
"$py" evaluate.py --model "$repo/models/demo" --num 100

#!/usr/bin/env python3
"""The planner's per-rank memory against compiled plans (issues 31, 32, 34): `megac plan
--cluster cpu:... --no-compile --json` (the model, every choice pinned) and `megac plan --ranks N
--json` (the compiled plan's own numbers) for the same layout.

- Persistent state (parameters + gradients + optimizer state) per rank equals the plan's within
  1% at zero 1/2/3 x dp 4 and cp 2 (error model: parameter counts are exact from the dims; 1%
  covers nothing but the rounding of shard sizes to whole elements). megac keeps ZeRO-2's bucket
  and ZeRO-3's gathered unit in its arena, and the model counts them in the workspace.
- The whole rank (both cp variants, --cp-comm-type all_gather and p2p, at cp 2 and 4): the plan's arena (which holds the state, constants and the largest function's
  transient buffers) plus the stash a pipelined plan's runner keeps outside it, against the
  model's state + activations + workspace, within 10% for every layout of the partition suite
  (tp, sp, dp, zero 1/2/3, cp, pp, vpp, recompute selective/full, fp32/bf16, MoE with ep) on the
  16-layer GPT, zero 2 with full recompute and bf16 under pp excepted (KNOWN). Error model: the state is exact; the activations are per-layer coefficients from
  the buffers the compiler keeps (docs/planner.md "Memory per device"), off by what they leave
  out (norm statistics, the loss' per-token values: under 2% here) plus the best-fit packing's
  gaps (the arena's top against its live peak: under 2% on these plans); 10% is the issues' bound.
- The activation-dominated GPT (seq 2048, hidden 256: the arena is 2.7x the state) and a
  Mixtral (ep) are held to the same bound, except the layouts docs/planner.md lists as known
  gaps (KNOWN below), which are held to a looser one so that a regression still fails.
"""
import argparse
import sys

import plan_reading as pr

SMALL = "gpt:layers=16,hidden=128,heads=4,seq=256,vocab=512"
LARGE = "gpt:layers=4,hidden=256,heads=8,seq=2048,vocab=512"
MOE = "mixtral:layers=8,hidden=128,heads=4,kv_heads=2,experts=4,topk=2,ffn=256,seq=256,vocab=512"

LAYOUTS = [
    dict(), dict(tp=2), dict(tp=2, sequence_parallel=1), dict(dp=2), dict(dp=4, zero=1),
    dict(dp=4, zero=2), dict(dp=4, zero=3), dict(cp=2), dict(cp=2, dp=2),
    # Both K/V exchanges of context parallelism (issue 32): all-gather-kv and the ring, whose
    # blocks in flight, dK/dV blocks, recomputed output and row statistics are plan scratch.
    dict(cp=2, cp_comm_type="p2p"), dict(cp=4), dict(cp=4, cp_comm_type="p2p"),
    dict(cp=2, dp=2, cp_comm_type="p2p"),
    dict(cp=2, tp=2, sequence_parallel=1), dict(pp=2, global_batch=4),
    dict(pp=2, vpp=2, global_batch=4), dict(recompute="selective"), dict(recompute="full"),
    dict(pp=2, global_batch=4, recompute="selective"), dict(pp=2, global_batch=4, recompute="full"),
    dict(pp=2, vpp=2, global_batch=4, recompute="full"),
    dict(tp=2, pp=2, sequence_parallel=1, global_batch=4), dict(dp=2, zero=1, pp=2, global_batch=4),
    dict(dp=2, zero=2, recompute="full"), dict(precision="bf16"), dict(tp=2, precision="bf16"),
    dict(recompute="selective", precision="bf16"), dict(pp=2, global_batch=4, precision="bf16"),
    dict(dp=4, zero=3, precision="bf16"),
    # ZeRO-3 keeping the forward's gathered parameters for the backward (issue 31).
    dict(dp=4, zero=3, reshard_after_forward="off"), dict(dp=2, zero=3, recompute="full",
                                                          reshard_after_forward="off"),
    dict(dp=4, zero=3, precision="bf16", reshard_after_forward="off"),
]
MOE_LAYOUTS = [dict(), dict(dp=2), dict(dp=2, zero=1), dict(tp=2), dict(dp=4, ep=2),
               dict(dp=2, ep=2, recompute="selective"), dict(dp=2, ep=2, precision="bf16")]
# Layouts outside 10% (docs/planner.md, Known gaps), each held to a looser bound so that a
# regression still fails: ZeRO-2 with full recompute on the small model, where apply_gradients
# gathers every parameter at once (twice the parameters' fp32 bytes, left out of the model) and
# is the arena's peak because full recompute makes the backward small (0.65). The other layouts
# listed here before (the large model's tp 2, bf16, pp 2 with full recompute, cp 2, cp x tp + sp;
# bf16 under pp) came within 10% once the weight-gradient GEMMs ran next to their layers instead
# of after the whole backward (mega-training-gemm-fusion, 2026-12-04): the one-layer transient
# the model used to add matched the deferred GEMMs' live activation gradients, not the plans.
KNOWN = {(SMALL, "dp=2 recompute=full zero=2"): 0.40}


def check(condition, message):
    if not condition:
        print("FAIL:", message)
        sys.exit(1)
    print("ok:", message)


def name(layout):
    return " ".join("%s=%s" % (k, v) for k, v in sorted(layout.items())
                    if k != "global_batch") or "one rank"


def full_layout(layout):
    out = dict(layout)
    out.setdefault("precision", "fp32")
    out.setdefault("micro_batch", 1)
    out.setdefault("global_batch", out.get("dp", 1))
    return out


def arena_summary(role):
    """The largest function's peak (megac plan --json's arena listing), for a failure's output."""
    fn = max(role["arena"], key=lambda a: a["top_bytes"])
    return "%s: top %d B, live peak %d B at instruction %d, by op %s" % (
        fn["function"], fn["top_bytes"], fn["peak_live_bytes"], fn["peak_instruction"],
        fn["peak_by_op"])


def whole_rank(megac, model, layout, bound):
    layout = full_layout(layout)
    roles = pr.compiled_roles(megac, model, layout)
    role = max(roles, key=pr.rank_bytes)
    plan = pr.rank_bytes(role)
    memory = pr.predicted(megac, model, layout)
    ratio = pr.predicted_rank_bytes(memory) / plan
    short = model.split(":")[0] + ":" + model.split(":")[1].split(",seq")[0]
    message = ("%s, %s: the planner's rank %.0f B / the plan's %d B (arena %d B + stash %d B) = "
               "%.3f, within %d%%" % (short, name(layout), pr.predicted_rank_bytes(memory), plan,
                                      role["arena_bytes"], role["stash_peak_bytes"], ratio,
                                      round(bound * 100)))
    if abs(ratio - 1) > bound:
        print("  model:", memory)
        print("  plan:", arena_summary(role))
    check(abs(ratio - 1) <= bound, message)
    return ratio


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--megac", required=True)
    args = parser.parse_args()

    for layout in (dict(dp=4, zero=1), dict(dp=4, zero=2), dict(dp=4, zero=3), dict(cp=2, dp=2),
                   dict(cp=2), dict(dp=4, zero=3, reshard_after_forward="off")):
        layout = full_layout(layout)
        role = pr.compiled_roles(args.megac, SMALL, layout)[0]
        m = pr.predicted(args.megac, SMALL, layout)
        state_model = m["parameters"] + m["gradients"] + m["optimizer"]
        ratio = state_model / pr.state_bytes(role)
        check(abs(ratio - 1) <= 0.01, "%s: the planner's parameters + gradients + optimizer state "
              "%.0f B within 1%% of the plan's %d B (%.4f)"
              % (name(layout), state_model, pr.state_bytes(role), ratio))

    for model, layouts in ((SMALL, LAYOUTS), (MOE, MOE_LAYOUTS), (LARGE, LAYOUTS)):
        for layout in layouts:
            whole_rank(args.megac, model, layout, KNOWN.get((model, name(layout)), 0.10))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Megatron GLM-5.3-Flash parity against an fp32 HF reference (issue 20): is Megatron's bf16
error bf16 noise (as large as HF-bf16's own) or a real error?

    PYTHONPATH=. python benchmarks/megatron_parity.py --model glm5_3_flash_4layer --out parity.json
    CPU smoke run:  PYTHONPATH=. python benchmarks/megatron_parity.py --model tiny --device cpu --tokens 64

In phases, each its own process and each one device call (issue 43; the 4-layer slice's whole
run does not fit in one 10-minute call), sharing a folder:

    python benchmarks/megatron_parity.py --phase ref --dir D [--model M --tokens T --device cpu]
    python benchmarks/megatron_parity.py --phase hf --dir D          # HF-bf16 column
    python benchmarks/megatron_parity.py --phase megatron --dir D    # Megatron-bf16 column (+ verdicts)
    python benchmarks/megatron_parity.py --phase report --dir D --out parity.json

`ref` writes D/meta.json (model, tokens, seeds, packed lengths, router margins and
each weight's sum) and D/reference.pt (token ids, fp32 logits single and packed, LoRA
B-gradients, routes, sharpened routers); `hf` and `megatron` rebuild the model from the seeds
(refused unless its weight sums are the reference's), print their column as soon as it is
done and write D/hf_bf16.json, D/megatron_bf16.json; `report` prints the table from the
folder alone and writes D/report.json. A `ref` cut short after its fp32 backward starts again
from D/reference_b_grads.pt. `--phase all` (the default) runs the four in one
process (a temporary folder without --dir), the model handed on instead of rebuilt.
tests/unit/model/test_parity_benchmark.py runs every phase on CPU on the tiny model.

HF glm5_next in fp32 (TF32 off) is the reference for two bf16 columns built from the same
weights: HF-bf16 and Megatron-bf16. Rows: KL(fp32 || bf16) per token on one sequence and on
a packed batch (the reference and HF-bf16 run the packed sequences one at a time, Megatron
runs them packed), argmax agreement, routing agreement (tokens whose top-k expert set equals
the reference's) with the random router and with routers sharpened to a median top-k margin
(`--router-margin`), and the LoRA B-gradient cosine (lora_B = 0, so dL/dB = s G A^T, from
each column's own full-weight gradient G) against the fp32 expectation. The criterion
(device/harness/parity.py): Megatron's KL <= 1.1 x HF-bf16's, single and packed, and its
LoRA cosine (all adapters together) >= HF-bf16's.

Router margin: at random init the k-th and (k+1)-th router logits of the 4-layer slice
(top-8 of 288) differ by a median 0.04 of the token's logit std, and bf16 noise upstream
(0.5-2% of that std, read off the 8-28% of tokens the packed diagnosis saw re-routed, docs/megatron.md)
flips them, so routing agreement reads noise. The default target, 0.5 std, is an assumption
(no trained GLM-5.3-Flash router is available here): 12x the random margin and 25-100x that
noise, so a correct bf16 implementation re-routes only a few % of tokens while an error that
moves router inputs by several % of their spread still shows. Each MoE layer is sharpened
in turn on the reference's own router inputs (`router_for_margin`); the sharpened routers are
swapped in for the routing row only, every other row uses the model as built.

Memory on one H200 (4-layer slice: 23.8B weights, 22B of them experts; 4096 tokens; V 154,880):
fp32 HF weights 88.6 GiB. Its backward never holds the full-weight gradients (88.6 GiB more):
each is reduced to G A^T as it is accumulated and dropped (`LoraBGrads`); the largest, one
layer's expert gate_up_proj, is 18 GiB, plus autograd's same-size per-expert slice
gradient while it accumulates (estimated peak 88.6 + 36 GiB + activations; not yet
measured: the run logs nothing until the fp32 LoRA grads are done). Held for the comparison: fp32 reference logits, single and
packed, 2 x 2.4 GiB (T x V x 4 B); top-k routes, A values, expected B grads and the
sharpened routers, under 0.1 GiB together. Then the same weights are cast to bf16 as HF
builds them (its fp32-kept router, conv, dt_bias, A_log and mHC base/scale stay fp32): 44.3
GiB; the Megatron model is built from them (44.3 GiB more) and HF freed.
"""
import argparse
import json
import math
import re
import tempfile
import time
from contextlib import contextmanager
from functools import partial
from pathlib import Path

import torch

from benchmarks.megatron_throughput import LORA_ALPHA, LORA_RANK, emit, hf_loss, log, meg_loss
from device.harness.megatron_setup import (
    DOMAIN_LORA_TARGETS,
    build_hf_on_gpu,
    init_distributed,
    megatron_from_hf_model,
    perturb_for_signal,
)
from device.harness.parity import (
    KL_SLACK,
    LoraBGrads,
    cosine,
    draw_lora_a,
    kl_and_dlogp,
    lora_rows,
    parity_verdicts,
    router_for_margin,
    routing_agreement,
    topk_margin_T,
)
from launcher.config.compose import compose
from launcher.workers.hf.model import VISION_PREFIX
from launcher.workers.hf.names import checkpoint_items, checkpoint_names_of, checkpoint_shapes_of
from model.megatron import full_logits, pack_lengths
from model.megatron.lora import apply_lora
from model.megatron.spec import ModelSpec
from model.names import EXPERTS

ROUTER_MARGIN = 0.5
"""Default median top-k router margin, in units of a token's logit std (module docstring)."""
ROUTER_PARAM = re.compile(r"layers\.(\d+)\.mlp\.(?:gate\.weight|router_weight)$")
"""HF's (mlp.gate.weight) and Megatron's (mlp.router_weight) router weight, layer captured."""


@contextmanager
def true_fp32():
    """No TF32 anywhere (cuDNN convolutions allow it by default) while the reference runs."""
    saved = torch.backends.cudnn.allow_tf32, torch.get_float32_matmul_precision()
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = saved[0]
        torch.set_float32_matmul_precision(saved[1])


def routers(model) -> dict[int, torch.nn.Parameter]:
    return {int(m.group(1)): p for n, p in model.named_parameters() if (m := ROUTER_PARAM.search(n))}


def router_modules(model) -> dict[int, torch.nn.Module]:
    """{layer: HF router (mlp.gate) or Megatron MoE block}: where routing can be watched."""
    found = {}
    for name, module in model.named_modules():
        match = re.search(r"layers\.(\d+)\.mlp(\.gate)?$", name)
        if match and (match.group(2) or hasattr(module, "route")):
            found[int(match.group(1))] = module
    return found


@contextmanager
def watched_routing(model):
    """{layer: top-k experts_TK} of the model's last forward (HF's router returns them;
    Megatron's MoE routes its input again, the same op on the same values)."""
    routes = {}

    def keep(layer, module, args, out):
        routes[layer] = (module.route(args[0])[1] if hasattr(module, "route") else out[2]).detach()

    handles = [m.register_forward_hook(partial(keep, layer)) for layer, m in router_modules(model).items()]
    try:
        yield routes
    finally:
        for handle in handles:
            handle.remove()


@contextmanager
def swapped_routers(model, weights: dict[int, torch.Tensor]):
    params = routers(model)
    saved = {layer: params[layer].detach().clone() for layer in weights}
    with torch.no_grad():
        for layer, w in weights.items():
            params[layer].copy_(w)
    try:
        yield
    finally:
        with torch.no_grad():
            for layer, w in saved.items():
                params[layer].copy_(w)


def router_input(hf, ids_T, layer: int) -> torch.Tensor:
    captured = {}
    gate = router_modules(hf)[layer]
    handle = gate.register_forward_hook(lambda m, args, out: captured.update(x=args[0].reshape(-1, args[0].shape[-1])))
    with torch.no_grad():
        hf(input_ids=ids_T[None], use_cache=False)
    handle.remove()
    return captured["x"]


def sharpened_routers(hf, ids_T, topk: int, margin: float) -> tuple[dict[int, torch.Tensor], dict]:
    """({layer: router weight with median top-k margin `margin`}, {layer: [margin before, after]}),
    layer by layer (each layer's inputs follow the earlier layers' new routing); hf is unchanged."""
    gates = router_modules(hf)
    if any(g.e_score_correction_bias.any() for g in gates.values()):
        raise ValueError("the router margin is read off the logits, which assumes expert_bias = 0 (random init)")
    weights, margins = {}, {}
    for layer, param in sorted(routers(hf).items()):
        with swapped_routers(hf, weights):
            x_TD = router_input(hf, ids_T, layer)
        before = topk_margin_T(x_TD @ param.detach().float().T, topk).median().item()
        weights[layer], after = router_for_margin(param.detach(), x_TD, topk, margin)
        margins[layer] = [round(before, 4), round(after, 4)]
    return weights, margins


def hf_logits(hf, ids_T, lengths: list[int] | None = None) -> torch.Tensor:
    """[T, V] fp32 logits of one sequence, or of `lengths` run one sequence at a time."""
    with torch.no_grad():
        parts = ids_T.split(lengths) if lengths else [ids_T]
        return torch.cat([hf(input_ids=s[None], use_cache=False).logits[0].float() for s in parts])


def hf_b_grads(hf, ids_T, expectation: LoraBGrads) -> dict[str, torch.Tensor]:
    """LoRA B grads from HF's full-weight gradients, each reduced the moment it is complete.

    A fused expert gradient [E, 2F, D] is multiplied by A^T first and the small product
    [E, 2F, R] converted to checkpoint tensors (the conversion splits and unbinds leading
    dims only, which commute with @ A^T): converting the gradient itself copies it whole."""
    trainable = {n: p for n, p in hf.named_parameters() if p.requires_grad}
    parts = checkpoint_names_of(hf, {n: p.shape for n, p in trainable.items()})

    def reduce(name, param):
        module = expectation.module_of(min(parts[name]))
        if param.dim() == 3 and module is not None:
            for ckpt_name, product in checkpoint_items(hf, [(name, expectation.expert_product(module, param.grad))]):
                expectation.add_product(ckpt_name, product)
        else:
            for ckpt_name, grad in checkpoint_items(hf, [(name, param.grad)]):
                expectation.add(ckpt_name, grad)
        param.grad = None

    handles = [p.register_post_accumulate_grad_hook(partial(reduce, n)) for n, p in trainable.items()]
    hf_loss(hf, ids_T).backward()
    for handle in handles:
        handle.remove()
    return expectation.b_grads()


def megatron_b_grads(meg, ids_T, packed, a_values: dict, topk: int) -> dict[str, torch.Tensor]:
    apply_lora(meg, DOMAIN_LORA_TARGETS, LORA_RANK, LORA_ALPHA, expert_rank=LORA_RANK // topk)
    params = dict(meg.named_parameters())
    with torch.no_grad():
        for name, value in a_values.items():
            params[name].copy_(value)
    meg_loss(meg, ids_T, packed).backward()
    return {name.replace("lora_A", "lora_B"): params[name.replace("lora_A", "lora_B")].grad for name in a_values}


def lora_cosines(got: dict, want: dict) -> dict:
    """Cosine over all adapters together and the worst adapter's (zero expectations skipped)."""
    names = [n for n in want if want[n].abs().sum() > 0]
    each = {n: cosine(got[n], want[n]) for n in names}
    worst = min(each, key=each.get)
    return {"lora_cosine": cosine(torch.cat([got[n].flatten().float() for n in names]),
                                  torch.cat([want[n].flatten() for n in names])),
            "lora_cosine_worst": each[worst], "lora_worst": worst}


def column(logits_single, logits_packed, routes: dict, routes_sharp: dict, ref: dict) -> dict:
    """One bf16 implementation's rows against the reference (logits freed by the caller)."""
    targets_T = ref["ids"].roll(-1)
    single = kl_and_dlogp(ref["single"][:-1], logits_single[:-1], targets_T[:-1])
    packed = kl_and_dlogp(ref["packed"], logits_packed, targets_T)
    agree = [routing_agreement(ref["routes"][k], routes[k]) for k in sorted(routes)]
    agree_sharp = [routing_agreement(ref["routes_sharp"][k], routes_sharp[k]) for k in sorted(routes_sharp)]
    return {"kl_single": single["kl_per_token"], "kl_packed": packed["kl_per_token"],
            "argmax_single": single["argmax_agree"], "argmax_packed": packed["argmax_agree"],
            "routing_random": min(agree), "routing_sharpened": min(agree_sharp),
            "routing_sharpened_per_layer": agree_sharp, "mean_abs_dlogp_single": single["mean_abs_dlogp"]}


def reference(hf, ids_T, lengths, expectation: LoraBGrads, topk: int, margin: float, b_grads: dict | None = None,
              keep_b_grads=lambda b_grads: None) -> dict:
    """Everything the comparison needs from the fp32 model; the backward runs first, so its
    peak never meets the held logits. `b_grads` given: the backward's result from an earlier
    try, not run again; `keep_b_grads` gets them as soon as they are done."""
    with true_fp32():
        if b_grads is None:
            b_grads = hf_b_grads(hf, ids_T, expectation)
            keep_b_grads(b_grads)
        ref = {"ids": ids_T, "b_grads": b_grads}
        log("fp32 lora grads", len(ref["b_grads"]))
        with watched_routing(hf) as routes:
            ref["single"] = hf_logits(hf, ids_T)
        ref["routes"], ref["packed"] = dict(routes), hf_logits(hf, ids_T, lengths)
        ref["sharp_weights"], ref["margins"] = sharpened_routers(hf, ids_T, topk, margin)
        with swapped_routers(hf, ref["sharp_weights"]), watched_routing(hf) as routes:
            hf_logits(hf, ids_T)
        ref["routes_sharp"] = dict(routes)
    log("router margins [random, sharpened]", ref["margins"])
    return ref


def cast_as_built(hf, model_cfg_bf16) -> None:
    """Each fp32 weight cast to the dtype HF gives it when built in bf16 (its fp32-kept
    modules stay fp32), one tensor at a time so the fp32 copy is freed as it goes."""
    built = build_hf_on_gpu(model_cfg_bf16, seed=0, device=torch.device("meta"))
    dtypes = {n: t.dtype for n, t in [*built.named_parameters(), *built.named_buffers()]}
    with torch.no_grad():
        for name, tensor in [*hf.named_parameters(), *hf.named_buffers()]:
            tensor.data = tensor.data.to(dtypes[name])


def hf_column(hf, ids_T, lengths, ref, expectation: LoraBGrads) -> dict:
    with watched_routing(hf) as routes:
        single = hf_logits(hf, ids_T)
    with swapped_routers(hf, ref["sharp_weights"]), watched_routing(hf) as routes_sharp:
        hf_logits(hf, ids_T)
    out = column(single, hf_logits(hf, ids_T, lengths), routes, routes_sharp, ref)
    log("hf_bf16 logits", out)
    return out | lora_cosines(hf_b_grads(hf, ids_T, expectation), ref["b_grads"])


def megatron_column(meg, ids_T, lengths, ref, a_values, topk: int) -> dict:
    single_pack, device = pack_lengths([ids_T.numel()], ids_T.device), ids_T.device
    with torch.no_grad():
        with watched_routing(meg) as routes:
            single = full_logits(meg(ids_T, single_pack)).float()
        with swapped_routers(meg, ref["sharp_weights"]), watched_routing(meg) as routes_sharp:
            meg(ids_T, single_pack)
        packed = full_logits(meg(ids_T, pack_lengths(lengths, device))).float()
    out = column(single, packed, routes, routes_sharp, ref)
    log("megatron_bf16 logits", out)
    return out | lora_cosines(megatron_b_grads(meg, ids_T, single_pack, a_values, topk), ref["b_grads"])


def lora_expectation(hf, spec, topk: int, device) -> tuple[dict, LoraBGrads]:
    """(A values, a fresh B-grad accumulator), A drawn once for every column."""
    rows = lora_rows(spec, DOMAIN_LORA_TARGETS)
    language = {n: p.shape for n, p in hf.named_parameters() if not n.startswith(VISION_PREFIX)}
    shapes = {k: s for parts in checkpoint_shapes_of(hf, language).values() for k, s in parts.items()}
    expert_rank = LORA_RANK // topk
    a_values = draw_lora_a(rows, shapes, spec.n_routed_experts, LORA_RANK, expert_rank, seed=11, device=device,
                           dtype=torch.bfloat16)
    scales = {m: LORA_ALPHA / (expert_rank if kind == EXPERTS else LORA_RANK) for m, (kind, _) in rows.items()}
    return a_values, partial(LoraBGrads, rows, a_values, scales, spec.n_routed_experts)


# Phases: `ref` writes META and REF into the folder, `hf` and `megatron` each rebuild the model
# from the seeds in META (its weight sums checked against the reference's) and write their
# column, `report` reads them all. `all` runs the four in one process, the model handed on.
META, REF, REPORT = "meta.json", "reference.pt", "report.json"
B_GRADS = "reference_b_grads.pt"
"""The fp32 backward's result, kept as soon as it is done: a `ref` phase cut short by the call's
time limit after it starts again from the logits (same ids and weights, else from scratch)."""
COLUMNS = {"hf": "hf_bf16", "megatron": "megatron_bf16"}
"""{phase: its column's key in the report and its file's stem (`<key>.json`)}."""
WEIGHT_SEED, PERTURB_SEED, IDS_SEED = 0, 1, 7


def write_json(path: Path, value) -> None:
    path.write_text(json.dumps(value, indent=1))


def read_json(path: Path):
    if not path.exists():
        raise SystemExit(f"{path} is missing: run the phase that writes it first (module docstring)")
    return json.loads(path.read_text())


def weight_sums(model) -> dict[str, float]:
    """{name: sum} of every weight and buffer, a rebuilt model must give the reference's: row sums
    in the tensor's dtype, then fp64 (a dtype= sum would copy an 18 GiB expert weight to fp64)."""
    with torch.no_grad():
        return {n: t.reshape(t.shape[0] if t.dim() > 1 else 1, -1).sum(-1).double().sum().item()
                for n, t in [*model.named_parameters(), *model.named_buffers()]}


def differing(want: dict[str, float], got: dict[str, float]) -> list[str]:
    """Names whose weight sums differ (or that only one side has)."""
    same = {n for n in want.keys() & got.keys() if math.isclose(got[n], want[n], rel_tol=1e-9, abs_tol=1e-12)}
    return sorted((want.keys() | got.keys()) - same)


class Setup:
    """What every phase derives from META: device, configs, top-k, spec, token ids, lengths."""

    def __init__(self, meta: dict):
        self.meta, self.device = meta, init_distributed(device_type=meta["device"])
        self.cfg32 = compose([f"model={meta['model']}", "model.dtype=float32"]).config
        self.cfg16 = compose([f"model={meta['model']}", "model.dtype=bfloat16"]).config
        arch = self.cfg32.model.arch
        self.topk, self.lengths = arch.num_experts_per_tok, meta["packed_lengths"]
        self.spec = ModelSpec.from_arch(arch, self.cfg16.model.dtype, pad_token_id=0)
        self.ids_T = torch.randint(0, arch.vocab_size, (meta["tokens"],), device=self.device,
                                   generator=torch.Generator(device=self.device).manual_seed(IDS_SEED))

    def fp32_model(self):
        """HF in fp32 from the seeds (perturbed when the reference was); checked against META's sums when set."""
        hf = build_hf_on_gpu(self.cfg32.model, seed=WEIGHT_SEED, device=self.device)
        if self.meta["perturbed_init"]:
            perturb_for_signal(hf, seed=PERTURB_SEED)
        if "weight_sums" in self.meta and (wrong := differing(self.meta["weight_sums"], weight_sums(hf))):
            raise SystemExit(f"the rebuilt model is not the reference's ({len(wrong)} weights differ, e.g. {wrong[:3]})")
        return hf

    def bf16_model(self, held: list):
        """HF-bf16 from the reference's weights: the model an earlier phase of this process left
        in `held` (taken out, so the caller keeps no reference), else rebuilt from the seeds."""
        hf = held.pop() if held else self.fp32_model()
        cast_as_built(hf, self.cfg16.model)
        return hf

    def reference(self, folder: Path) -> dict:
        """REF on this device (read after the models are built: it adds to no build's peak)."""
        ref = torch.load(folder / REF, map_location=self.device, weights_only=True)
        if not torch.equal(ref["ids"], self.ids_T):
            raise SystemExit(f"{folder / REF} was made from other token ids")
        return ref


def phase_ref(folder: Path, run: Setup, held: list) -> None:
    """The fp32 reference and META (with the weights' sums) into the folder; the fp32 model
    left in `held` for a next phase of this process."""
    hf = run.fp32_model()
    run.meta["weight_sums"] = sums = weight_sums(hf)
    _, new_expectation = lora_expectation(hf, run.spec, run.topk, run.device)
    earlier = torch.load(folder / B_GRADS, map_location=run.device, weights_only=True) if (folder / B_GRADS).exists() else {}
    if earlier and (not torch.equal(earlier["ids"], run.ids_T) or differing(earlier["weight_sums"], sums)):
        earlier = {}
    log("fp32 lora grads from an earlier try", bool(earlier))

    def keep(b_grads):
        torch.save({"ids": run.ids_T, "weight_sums": sums, "b_grads": b_grads}, folder / B_GRADS)

    ref = reference(hf, run.ids_T, run.lengths, new_expectation(), run.topk, run.meta["router_margin_target"],
                    earlier.get("b_grads"), keep)
    torch.save({k: v for k, v in ref.items() if k != "margins"}, folder / REF)
    (folder / B_GRADS).unlink()
    run.meta["router_margins"] = ref["margins"]
    write_json(folder / META, run.meta)
    held.append(hf)


def phase_hf(folder: Path, run: Setup, held: list) -> None:
    hf = run.bf16_model(held)
    _, new_expectation = lora_expectation(hf, run.spec, run.topk, run.device)
    out = hf_column(hf, run.ids_T, run.lengths, run.reference(folder), new_expectation())
    write_json(folder / f"{COLUMNS['hf']}.json", out)
    log("hf_bf16", out)
    held.append(hf)


def phase_megatron(folder: Path, run: Setup, held: list) -> None:
    hf = run.bf16_model(held)
    a_values, _ = lora_expectation(hf, run.spec, run.topk, run.device)
    meg = megatron_from_hf_model(hf, run.cfg16.model, run.device)
    del hf
    if run.device.type == "cuda":
        torch.cuda.empty_cache()
    out = megatron_column(meg, run.ids_T, run.lengths, run.reference(folder), a_values, run.topk)
    write_json(folder / f"{COLUMNS['megatron']}.json", out)
    log("megatron_bf16", out)
    if (hf_file := folder / f"{COLUMNS['hf']}.json").exists():
        log("verdicts", parity_verdicts(read_json(hf_file), out))


def report(folder: Path) -> dict:
    """META (less the weight sums), both columns and the verdicts, from the folder."""
    out = {k: v for k, v in read_json(folder / META).items() if k != "weight_sums"}
    for key in COLUMNS.values():
        out[key] = read_json(folder / f"{key}.json")
    out["verdicts"] = parity_verdicts(out["hf_bf16"], out["megatron_bf16"])
    write_json(folder / REPORT, out)
    return out


ROWS = [("kl_single", "KL(fp32 || .) per token, single"), ("kl_packed", "KL per token, packed"),
        ("argmax_single", "argmax agreement, single"), ("argmax_packed", "argmax agreement, packed"),
        ("routing_random", "routing agreement, random router (worst layer)"),
        ("routing_sharpened", "routing agreement, sharpened router (worst layer)"),
        ("lora_cosine", "LoRA B-grad cosine vs fp32, all adapters"),
        ("lora_cosine_worst", "LoRA B-grad cosine vs fp32, worst adapter")]


def table(out: dict) -> str:
    lines = [f"{'':52s} {'HF-bf16':>12s} {'Megatron-bf16':>14s}"]
    lines += [f"{label:52s} {out['hf_bf16'][key]:12.6g} {out['megatron_bf16'][key]:14.6g}" for key, label in ROWS]
    rules = {"kl_single": f"Megatron KL single <= {KL_SLACK} x HF-bf16's",
             "kl_packed": f"Megatron KL packed <= {KL_SLACK} x HF-bf16's",
             "lora_cosine": "Megatron LoRA cosine (all adapters) >= HF-bf16's"}
    lines += [f"{'PASS' if ok else 'FAIL'}  {rules[name]}" for name, ok in out["verdicts"].items()]
    return "\n".join(lines)


PHASES = {"ref": phase_ref, "hf": phase_hf, "megatron": phase_megatron}


def main() -> None:
    parser = argparse.ArgumentParser(epilog="phases ref, hf, megatron, report in turn, each its own process "
                                            "(one device call each), share --dir; all runs them in one")
    parser.add_argument("--phase", default="all", choices=[*PHASES, "report", "all"])
    parser.add_argument("--dir", default=None, help="the phases' folder (a temporary one for --phase all without it)")
    parser.add_argument("--model", default=None, help="default glm5_3_flash_4layer; later phases take the ref's")
    parser.add_argument("--tokens", type=int, default=None, help="default 4096")
    parser.add_argument("--device", default=None, choices=["cuda", "cpu"], help="default cuda")
    parser.add_argument("--router-margin", type=float, default=ROUTER_MARGIN,
                        help="median top-k router margin for the routing row, in logit stds")
    parser.add_argument("--perturb", action="store_true", help="move mHC base and k-pool weights off HF's constants")
    parser.add_argument("--out", default=None, help="the report's JSON (phases report and all)")
    args = parser.parse_args()
    if args.dir is None and args.phase != "all":
        parser.error(f"--phase {args.phase} needs --dir")
    with tempfile.TemporaryDirectory(prefix="parity-") as scratch:
        folder = Path(args.dir or scratch)
        folder.mkdir(parents=True, exist_ok=True)
        if args.phase in ("ref", "all"):
            tokens = args.tokens or 4096
            meta = {"model": args.model or "glm5_3_flash_4layer", "tokens": tokens, "device": args.device or "cuda",
                    "packed_lengths": [tokens * 5 // 8, tokens // 4, tokens - tokens * 5 // 8 - tokens // 4],
                    "router_margin_target": args.router_margin, "perturbed_init": args.perturb, "kl_slack": KL_SLACK}
        else:
            meta = read_json(folder / META)
            given = {"model": args.model, "tokens": args.tokens, "device": args.device}
            if wrong := {k: v for k, v in given.items() if v is not None and v != meta[k]}:
                parser.error(f"{folder / META} was written for {({k: meta[k] for k in wrong})}, not {wrong}")
        phases = list(PHASES) if args.phase == "all" else [args.phase] if args.phase in PHASES else []
        run, held = Setup(meta) if phases else None, []
        for phase in phases:
            start = time.perf_counter()
            PHASES[phase](folder, run, held)
            log(f"phase {phase} wall_s", round(time.perf_counter() - start, 1))
        if args.phase in ("report", "all"):
            out = report(folder)
            emit(out, args.out)
            print(table(out), flush=True)


if __name__ == "__main__":
    main()

"""``streamdp privacy``: convert zCDP parameters to (ε, δ) and show the cost and threshold of a mechanism.

    streamdp privacy convert --rho R --delta D [--json]
    streamdp privacy cost --mechanism NAME [parameters] [--target-delta D] [--json]

Mechanisms and their parameters (all required unless marked optional). The three that are query kinds carry the
kind's name; the older mechanism names stay as aliases.

    continual_counts    --sigma --horizon --delta-item --cap [--noise] [--estimator]
                                                                    Rogers (unknown-domain) §4.3, user level
                        (alias binary-tree)
    top_k               --epsilon --delta --k --kbar                    Rogers (unknown-domain) Alg. 3 / Thm 9,
                        (alias gumbel-topk)                               one window's call
    window_histogram    --epsilon --delta --l0 --linf [--noise] [--kbar] Rogers (unknown-domain) Alg. 1 / Thm 7
                        (aliases gaussian-histogram, laplace-histogram;   (Alg. 2 / Thm 8 with --kbar)
                         topkbar-gaussian = with --kbar)
    pay-what-you-get    --epsilon --delta --k-star --calls [--kbar]     Rogers (unknown-domain) Alg. 4 / Thm 10
                        (as written: ⊥ counted towards k*; the top_k kind does not count it, so this whole-run
                         figure is not the top_k kind's — config check --explain gives that)
    gaussian            --sigma --l2-sensitivity                        Rogers (unknown-domain) Thm 4
    laplace             --scale --l0 --linf                             Rogers (unknown-domain) Thm 7 proof
    exponential         --epsilon [--k]                                 Rogers (unknown-domain) Thm 5

Every cost is also given as ε of (ε, δ_target)-DP (the Canonne–Kamath–Steinke conversion of the ρ part), at
``--target-delta`` (default: the mechanism's δ + 10⁻⁶). Bad parameters print one line and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import math

from streamdp.accounting.cost import Cost
from streamdp.accounting.zcdp import bun_steinke_epsilon, cks_epsilon, zcdp_to_dp
from streamdp.cli.main import CLIError

__all__ = ["register", "MECHANISMS"]


# ------------------------------------------------------------------------------------------- argument types
def _real(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v):
        raise argparse.ArgumentTypeError(f"expected a finite number, got {text!r}")
    return v


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _one_line_errors(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """argparse prints the usage block before an error; the operator CLI prints one line and exits with 2."""

    def error(message: str):  # noqa: ANN202 — argparse's signature
        p.exit(2, f"{p.prog}: error: {message}\n")

    p.error = error  # type: ignore[method-assign]
    return p


# ------------------------------------------------------------------------------------------------ mechanisms
def _gaussian(a):
    from streamdp.mechanisms.gaussian import gaussian_cost

    return gaussian_cost(a.sigma, a.l2_sensitivity), None, {"sigma": a.sigma}


def _laplace(a):
    from streamdp.mechanisms.laplace import laplace_cost

    return laplace_cost(a.scale, a.linf, a.l0), None, {"laplace_scale": a.scale}


def _exponential(a):
    from streamdp.mechanisms.exponential import exponential_mechanism_cost

    k = 1 if a.k is None else a.k
    return exponential_mechanism_cost(a.epsilon, k), None, {"gumbel_scale_per_unit_range": 1.0 / a.epsilon}


def _histogram(noise):
    def run(a):
        from streamdp.mechanisms.unknown_domain_histogram import UnknownDomainHistogram

        m = UnknownDomainHistogram(a.epsilon, a.delta, a.l0, a.linf, noise=noise)
        key = "laplace_scale" if noise == "laplace" else "sigma"
        return m.cost(), m.threshold, {key: m.scale}

    return run


def _topkbar(a):
    from streamdp.mechanisms.unknown_domain_histogram import TopKbarGaussianHistogram

    m = TopKbarGaussianHistogram(a.epsilon, a.delta, a.kbar, a.l0, a.linf)
    note = "T; the noisy threshold is T + c_(kbar+1) + N(0, sigma^2)"
    return m.cost(), m.threshold, {"sigma": m.sigma, "threshold_note": note}


def _gumbel(a):
    from streamdp.mechanisms.unknown_domain_gumbel import UnknownDomainGumbel

    m = UnknownDomainGumbel(a.epsilon, a.delta, a.k, a.kbar)
    note = "T; the noisy threshold is T + c_(kbar+1) + Gumbel(beta)"
    return m.cost(), m.threshold, {"gumbel_scale": m.beta, "threshold_note": note}


def _pwyg(a):
    from streamdp.mechanisms.pay_what_you_get import PayWhatYouGet
    from streamdp.mechanisms.unknown_domain_gumbel import gumbel_topk_threshold

    if a.calls < 1:
        raise ValueError(f"calls must be an integer ≥ 1, got {a.calls}")
    m = PayWhatYouGet.from_state(a.epsilon, a.delta, {"k_star": a.k_star, "used": 0, "calls": a.calls})
    # Each call uses Thm 9's threshold, which depends on that call's k̄ (shown when --kbar is given).
    threshold = None if a.kbar is None else gumbel_topk_threshold(a.epsilon, a.delta, a.kbar)
    return m.total_cost(), threshold, {
        "gumbel_scale": 1.0 / a.epsilon,
        "threshold_note": "T of each call; the noisy threshold is T + c_(kbar+1) + Gumbel(beta)",
    }


def _binary_tree(a):
    try:
        from streamdp.mechanisms.binary_tree import binary_tree_cost, binary_tree_threshold
    except ModuleNotFoundError as e:  # pragma: no cover — depends on the rest of the tree
        raise CLIError(f"binary-tree accounting is unavailable ({e})") from None
    estimator = a.estimator or "plain"
    cost = binary_tree_cost(a.sigma, a.horizon, a.delta_item, a.cap, estimator)
    if not isinstance(cost, Cost):
        rho, delta = cost
        cost = Cost.zcdp(rho, delta)
    # The CLI spells the noise "discrete-gaussian"; the library's identifier is "discrete_gaussian".
    thr = binary_tree_threshold(a.sigma, a.horizon, a.delta_item, a.cap, a.noise.replace("-", "_"))
    levels = math.ceil(math.log2(a.horizon + 1)) if a.horizon >= 1 else None
    return cost, float(thr), {"sigma": a.sigma, "levels": levels, "noise": a.noise, "estimator": estimator}


def _window_histogram(a):
    """The ``window_histogram`` kind: every count above the threshold (Laplace or Gaussian noise), or with
    ``--kbar`` the top-(k̄+1) variant (Gaussian only)."""
    noise = a.noise or "gaussian"
    if noise not in ("gaussian", "laplace"):
        raise ValueError(f"--noise for window_histogram is gaussian or laplace, got {noise}")
    if a.kbar is not None:
        if noise != "gaussian":
            raise ValueError("--kbar (the top-(kbar+1) variant) takes gaussian noise only")
        return _topkbar(a)
    return _histogram(noise)(a)


#: name → (required options, optional options, handler); names of query kinds first
MECHANISMS: dict[str, tuple[tuple[str, ...], tuple[str, ...], object]] = {
    "continual_counts": (("sigma", "horizon", "delta_item", "cap"), ("noise", "estimator"), _binary_tree),
    "top_k": (("epsilon", "delta", "k", "kbar"), (), _gumbel),
    "window_histogram": (("epsilon", "delta", "l0", "linf"), ("noise", "kbar"), _window_histogram),
    "pay-what-you-get": (("epsilon", "delta", "k_star", "calls"), ("kbar",), _pwyg),
    "gaussian": (("sigma", "l2_sensitivity"), (), _gaussian),
    "laplace": (("scale", "l0", "linf"), (), _laplace),
    "exponential": (("epsilon",), ("k",), _exponential),
    # the earlier names (aliases)
    "binary-tree": (("sigma", "horizon", "delta_item", "cap"), ("noise", "estimator"), _binary_tree),
    "gumbel-topk": (("epsilon", "delta", "k", "kbar"), (), _gumbel),
    "laplace-histogram": (("epsilon", "delta", "l0", "linf"), (), _histogram("laplace")),
    "gaussian-histogram": (("epsilon", "delta", "l0", "linf"), (), _histogram("gaussian")),
    "topkbar-gaussian": (("epsilon", "delta", "l0", "linf", "kbar"), (), _topkbar),
}

#: alias → the name it stands for
ALIASES = {"binary-tree": "continual_counts", "gumbel-topk": "top_k", "laplace-histogram": "window_histogram",
           "gaussian-histogram": "window_histogram", "topkbar-gaussian": "window_histogram"}

#: δ′ added to a mechanism's δ for the default ``--target-delta`` (as ``streamdp budget show --delta-prime``)
DEFAULT_DELTA_PRIME = 1e-6

_PARAMS = ("sigma", "l2_sensitivity", "scale", "epsilon", "delta", "l0", "linf", "k", "kbar", "k_star", "calls",
           "horizon", "delta_item", "cap", "noise", "estimator")


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


# --------------------------------------------------------------------------------------------------- commands
def _fmt(x) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.10g}"
    return str(x)


def cmd_convert(args) -> int:
    try:
        eps_bs = bun_steinke_epsilon(args.rho, args.delta)
        eps_cks = cks_epsilon(args.rho, args.delta)
    except ValueError as e:
        raise CLIError(str(e)) from None
    if args.json:
        print(json.dumps({"rho": args.rho, "delta": args.delta, "epsilon_bun_steinke": eps_bs, "epsilon_cks": eps_cks}))
    else:
        print(f"rho = {_fmt(args.rho)}, delta = {_fmt(args.delta)}")
        print(f"epsilon (Bun-Steinke, rho + 2*sqrt(rho*log(1/delta)))  {_fmt(eps_bs)}")
        print(f"epsilon (Canonne-Kamath-Steinke, optimal)              {_fmt(eps_cks)}")
    return 0


def cmd_cost(args) -> int:
    required, optional, handler = MECHANISMS[args.mechanism]
    missing = [_flag(n) for n in required if getattr(args, n) is None]
    if missing:
        raise CLIError(f"--mechanism {args.mechanism} needs {', '.join(missing)}")
    extra = [_flag(n) for n in _PARAMS if getattr(args, n) is not None and n not in required + optional]
    if extra:
        raise CLIError(f"--mechanism {args.mechanism} does not take {', '.join(extra)}")
    if handler is _binary_tree:
        if args.noise is None:
            args.noise = "gaussian"
        elif args.noise == "laplace":
            raise CLIError(f"--mechanism {args.mechanism} takes --noise gaussian or discrete-gaussian")
    try:
        cost, threshold, extras = handler(args)
        target = args.target_delta
        if target is None:
            target = cost.zcdp_delta + DEFAULT_DELTA_PRIME
        eps = zcdp_to_dp(cost.zcdp_rho, cost.zcdp_delta, target)
    except ValueError as e:
        raise CLIError(f"{args.mechanism}: {e}") from None
    params = {n: getattr(args, n) for n in required + optional if getattr(args, n) is not None}
    out = {
        "mechanism": args.mechanism,
        "params": params,
        "rho": cost.zcdp_rho,
        "delta": cost.zcdp_delta,
        "threshold": threshold,
        **{k: v for k, v in extras.items() if k != "threshold_note"},
    }
    out["target_delta"] = target
    out["epsilon_cks"] = eps
    if args.json:
        print(json.dumps(out))
        return 0
    alias = f" = {ALIASES[args.mechanism]}" if args.mechanism in ALIASES else ""
    print(f"mechanism  {args.mechanism}{alias}  ({', '.join(f'{_flag(k)} {_fmt(v)}' for k, v in params.items())})")
    print(f"rho        {_fmt(cost.zcdp_rho)}")
    print(f"delta      {_fmt(cost.zcdp_delta)}")
    if threshold is not None:
        note = extras.get("threshold_note")
        print(f"threshold  {_fmt(threshold)}" + (f"  ({note})" if note else ""))
    for k, v in extras.items():
        if k != "threshold_note":
            print(f"{k:<10} {_fmt(v)}")
    how = "" if args.target_delta is not None else f": the mechanism's delta + {DEFAULT_DELTA_PRIME:g}"
    print(f"epsilon    {_fmt(eps)} at total delta {_fmt(target)} (Canonne-Kamath-Steinke{how})")
    return 0


# --------------------------------------------------------------------------------------------------- register
def register(subparsers) -> None:
    p = _one_line_errors(subparsers.add_parser(
        "privacy", help="privacy accounting: conversions and mechanism costs",
        description="Privacy arithmetic without a deployment: convert a zCDP guarantee (rho, delta) to "
                    "(epsilon, delta)-DP, and print the cost, threshold and epsilon of a mechanism — by the name of "
                    "its query kind (continual_counts, top_k, window_histogram) or of the mechanism — for given "
                    "parameters."))
    sub = p.add_subparsers(dest="privacy_command", metavar="{convert,cost}")
    sub.required = True

    c = _one_line_errors(sub.add_parser("convert", allow_abbrev=False,
                                            help="rho-zCDP -> (epsilon, delta)-DP (Bun-Steinke and CKS)"))
    c.add_argument("--rho", type=_real, required=True, help="zCDP parameter rho (>= 0)")
    c.add_argument("--delta", type=_real, required=True, help="target delta of the conversion, in (0, 1)")
    c.add_argument("--json", action="store_true", help="print one JSON object")
    c.set_defaults(func=cmd_convert)

    epilog = "parameters per mechanism ([optional]):\n" + "\n".join(
        f"  {name:<19} " + " ".join([_flag(n) for n in req] + [f"[{_flag(n)}]" for n in opt])
        + (f"   (= {ALIASES[name]})" if name in ALIASES else "")
        for name, (req, opt, _) in MECHANISMS.items()
    ) + f"\n\nepsilon is printed at --target-delta (default: the mechanism's delta + {DEFAULT_DELTA_PRIME:g})."
    k = _one_line_errors(sub.add_parser("cost", allow_abbrev=False, epilog=epilog,
                                         formatter_class=argparse.RawDescriptionHelpFormatter,
                                         help="privacy cost (rho, delta) and threshold of a mechanism"))
    k.add_argument("--mechanism", required=True, choices=list(MECHANISMS), metavar="NAME",
                   help=f"a query kind or mechanism: {', '.join(n for n in MECHANISMS if n not in ALIASES)} "
                        f"(aliases: {', '.join(ALIASES)})")
    k.add_argument("--sigma", type=_real, help="Gaussian noise standard deviation")
    k.add_argument("--l2-sensitivity", type=_real, help="l2 sensitivity (gaussian)")
    k.add_argument("--scale", type=_real, help="Laplace scale b (laplace)")
    k.add_argument("--epsilon", type=_real, help="epsilon (noise scale Delta_inf/epsilon; Gumbel beta = 1/epsilon)")
    k.add_argument("--delta", type=_real, help="delta of the threshold (failure probability)")
    k.add_argument("--l0", type=_integer, help="max distinct items per user (Delta_0)")
    k.add_argument("--linf", type=_real, help="max change of one count (Delta_inf)")
    k.add_argument("--k", type=_integer, help="items returned (top-k) / selections (exponential)")
    k.add_argument("--kbar", type=_integer, help="size of the top-(kbar) histogram looked at")
    k.add_argument("--k-star", type=_integer, help="total items over all calls (pay-what-you-get)")
    k.add_argument("--calls", type=_integer, help="number of calls made, l* (pay-what-you-get)")
    k.add_argument("--horizon", type=_integer, help="horizon L in windows (binary-tree)")
    k.add_argument("--delta-item", type=_real, help="per-item failure probability (binary-tree)")
    k.add_argument("--cap", type=_integer, help="max contributions of a user to one item, C (binary-tree)")
    k.add_argument("--noise", choices=("gaussian", "discrete-gaussian", "discrete_gaussian", "laplace"),
                   help="continual_counts: node noise, gaussian (default) or discrete-gaussian; window_histogram: "
                        "gaussian (default) or laplace")
    k.add_argument("--estimator", choices=("plain", "optimal"),
                   help="continual_counts: running-count estimator, plain (default) or optimal (Honaker: every "
                        "completed tree node is charged)")
    k.add_argument("--target-delta", type=_real,
                   help="print epsilon at this total delta (CKS; default: the mechanism's delta + 1e-6)")
    k.add_argument("--json", action="store_true", help="print one JSON object")
    k.set_defaults(func=cmd_cost)

"""The report's "Accuracy": each stack's top-1 against the FP32 reference beside its price, and the bound
(`experiment.accuracy.max_top1_drop`) that keeps a cheaper but less accurate variant from being chosen."""

from __future__ import annotations

import pandas as pd

from experiments.report.data import SweepData
from experiments.report.render import Document, format_frame, usd

COST = "cost_per_1k_images_usd"
DROP = "top1_drop"


def _share(value: object) -> str:
    return "-" if value is None or pd.isna(value) else f"{100 * float(value):.1f} %"


def accuracy_section(doc: Document, data: SweepData, labels: dict[str, str]) -> list[str]:
    """The section (only where the sweep scored accuracy); returns the summary's lines."""
    ok = data.ok
    if DROP not in ok or ok[DROP].isna().all():
        return []
    scored = ok[ok[DROP].notna()]
    labelled = "accuracy_top1" in scored and scored["accuracy_top1"].notna().any()
    bound = pd.to_numeric(scored["max_top1_drop"], errors="coerce").dropna()
    limit = float(bound.iloc[0]) if not bound.empty else None
    doc.h(1, "Accuracy")
    measure = ("top-1 and top-5 on the labelled corpus, beside the FP32 reference's on the same images" if labelled
               else "without labels, the share of images whose top-1 is the FP32 reference's (the drop is the "
                    "disagreement, in percent)")
    doc.p(f"Each stack's served outputs on the corpus's first {int(scored['accuracy_images'].max())} images, "
          f"before its trials: {measure}. "
          + (f"The bound is a top-1 drop of {limit:g} points (`experiment.accuracy.max_top1_drop`): a stack over it "
             "is measured and shown, never chosen." if limit is not None else
             "No bound was set (`experiment.accuracy.max_top1_drop`): every stack may be chosen."))
    rows = []
    for (tier, stack), group in scored.groupby(["tier", "stack"], sort=True):
        first, costs = group.iloc[0], group[COST].dropna() if COST in group else pd.Series(dtype=float)
        rows.append({"tier": labels.get(tier, tier), "stack": stack,
                     **({"top-1": _share(first.get("accuracy_top1")), "top-5": _share(first.get("accuracy_top5")),
                         "reference top-1": _share(first.get("reference_top1"))} if labelled else
                        {"agrees with reference": _share(first.get("reference_top1_agreement"))}),
                     "top-1 drop (points)": f"{float(first[DROP]):+.2f}",
                     "cheapest $/1k": float(costs.min()) if not costs.empty else float("nan"),
                     "chosen?": "**no: over the bound**" if bool(group["over_accuracy_bound"].any()) else "may be"})
    frame = pd.DataFrame(rows)
    doc.table(format_frame(frame, {"cheapest $/1k": usd}), [c == "cheapest $/1k" for c in frame.columns])
    over = sorted({str(s) for s in scored.loc[scored["over_accuracy_bound"], "stack"]})
    if over:
        return [f"accuracy: {', '.join(over)} lost more than {limit:g} points of top-1 and are never chosen"]
    return []

"""The report's cell formatting and per-load tables, cell by cell, on the cases a sweep's tables hold: missing
figures, nullable columns, a best value to bold, 95 % intervals, caveat marks, text columns; and a load measured
over one protocol only. These functions run thousands of times in a large sweep's report, in plain Python."""

from __future__ import annotations

import math

import pandas as pd

from experiments.report import marks, tables
from experiments.report.render import format_frame, ms, rate


def test_cells_are_formatted_bolded_given_their_interval_and_marked() -> None:
    frame = pd.DataFrame({"p50": [12.34, 8.0, math.nan, 8.0], "rps": pd.array([10, None, 30, 40], dtype="Int64"),
                          "stack": ["a", "b", None, "d"]}, index=["w", "x", "y", "z"])
    low = pd.DataFrame({"p50": [12.0, math.nan, 1.0]}, index=["w", "x", "y"])
    high = pd.DataFrame({"p50": [13.0, 9.0, 2.0]}, index=["w", "x", "y"])
    cell_marks = pd.DataFrame({"p50": ["†", "", "‡", math.nan], "stack": ["§", "", "", ""]},
                              index=["w", "x", "y", "z"])
    out = format_frame(frame, {"p50": ms, "rps": rate}, best={"p50": "min", "rps": "max"}, marks=cell_marks,
                       intervals=(low, high))
    assert list(out.index) == ["w", "x", "y", "z"] and list(out.columns) == ["p50", "rps", "stack"]
    assert out["p50"].tolist() == ["12.3 (12.0–13.0) †", "**8.00**", "— ‡", "**8.00**"]
    assert out["rps"].tolist() == ["10.0", "—", "30.0", "**40.0**"]
    assert out["stack"].tolist() == ["a §", "b", "—", "d"], "a missing text shows as a dash, never as nan"


def test_a_single_figure_is_not_bolded_and_an_empty_table_keeps_its_rows() -> None:
    out = format_frame(pd.DataFrame({"p50": [5.0, math.nan]}), {"p50": ms}, best={"p50": "min"})
    assert out["p50"].tolist() == ["5.00", "—"]
    assert format_frame(pd.DataFrame(index=[1, 2]), {}).shape == (2, 0)


def test_mark_legend_counts_the_figures_that_carry_each_mark() -> None:
    table = pd.DataFrame({1: ["†", "", "†‡"], 8: ["", math.nan, "§"]})
    assert marks.legend(table) == (f"† {marks.MEANING['†']}: 2 of 5 figures; ‡ {marks.MEANING['‡']}: 1 of 5 figures; "
                                   f"§ {marks.MEANING['§']}: 1 of 5 figures.")
    assert marks.legend(pd.Series(["", math.nan])) is None


def test_grpc_speedup_leaves_out_a_load_measured_over_one_protocol_only() -> None:
    rows = []
    for load, protocols in (("c1", ("http", "grpc")), ("c4", ("http",))):
        for protocol in protocols:
            for batch, p50 in ((1, 10.0), (8, 40.0)):
                rows.append({"load": load, "variant": "triton_onnx", "input_format": "tensor", "batch_size": batch,
                             "protocol": protocol, tables.P50: p50 / (2 if protocol == "grpc" else 1),
                             tables.MARKS: "†" if protocol == "grpc" and batch == 8 else ""})
    ok = pd.DataFrame(rows)
    speedup = tables.grpc_speedup(ok)
    assert list(speedup) == ["c1"]
    assert speedup["c1"].loc["triton_onnx/tensor"].tolist() == [2.0, 2.0]
    assert tables.grpc_speedup(ok, tables.MARKS)["c1"].loc["triton_onnx/tensor"].tolist() == ["", "†"]
    assert tables.grpc_speedup(ok[ok["protocol"] == "http"]) == {}

"""``dcgmi diag -r N -j``: DCGM 4 (``"DCGM Diagnostic"``, entity results, ``Pass``) and DCGM 3 and
older (``"DCGM GPU Diagnostic"``, ``gpu_ids``, ``PASS``), with the stray text dcgmi may print first."""

from __future__ import annotations

import json
from dataclasses import dataclass

from checks.verdict import CheckError

TOP_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")


@dataclass(frozen=True)
class DiagResult:
    category: str
    test: str
    gpus: str        # "0,1,2" or one entity id
    status: str      # pass | fail | warn | skip | not run
    detail: str


def parse_dcgm_diag(text: str) -> list[DiagResult]:
    start = text.find("{")
    if start < 0:
        raise CheckError("dcgmi diag printed no JSON")
    try:
        data = json.loads(text[start:])
    except ValueError as e:
        raise CheckError(f"dcgmi diag JSON is malformed or cut short: {e}") from None
    top = next((data[k] for k in TOP_KEYS if isinstance(data, dict) and k in data), None)
    if not isinstance(top, dict) or "test_categories" not in top:
        raise CheckError(f"dcgmi diag JSON has none of {', '.join(TOP_KEYS)} with test_categories")
    results = []
    for category in top["test_categories"] or []:
        if not isinstance(category, dict):
            continue
        for test in category.get("tests") or []:
            if not isinstance(test, dict):
                continue  # DCGM 3 writes null entries between tests
            for r in test.get("results") or []:
                if not isinstance(r, dict):
                    continue
                # DCGM 3 names the GPU "gpu_ids" or "gpu_id" (per version), DCGM 4 "entity_id"
                gpus = next((str(r[k]) for k in ("gpu_ids", "gpu_id", "entity_id", "entity_ids") if k in r), "")
                warnings = r.get("warnings") or []
                detail = "; ".join(w.get("warning", str(w)) if isinstance(w, dict) else str(w) for w in warnings)
                detail = detail or str(r.get("info") or "")
                results.append(DiagResult(category.get("category", ""), test.get("name", ""), gpus,
                                          str(r.get("status", "")).strip().lower(), detail))
    if not results:
        raise CheckError("dcgmi diag JSON holds no test result")
    return results

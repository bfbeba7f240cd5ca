"""Quality: the evaluation protocol on PEPs (docs/evaluation.md), training variants, probes."""

//! elfgate-bench

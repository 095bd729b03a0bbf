"""Speed and memory benchmarks: side-by-side ratios measured in one run."""

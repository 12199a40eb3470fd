"""``relay_bench.py``'s modules, one per workload, plus what they share (``common``), the run
(``plans``) and the table (``table``)."""

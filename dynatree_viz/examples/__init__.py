"""Tested choosers of the case a figure teaches: an off-top-1 branching iteration, the state
where the explorer's knobs move the accepted length, a node the rejection rule decided,
a `match` node whose draw shows."""

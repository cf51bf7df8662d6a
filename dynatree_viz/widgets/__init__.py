"""ipywidgets front ends: the iteration stepper, the batch stepper and parameter explorer,
regrowing a tree (replayed or live), and the sampling controls."""

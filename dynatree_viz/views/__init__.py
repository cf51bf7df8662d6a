"""One Plotly figure per module: the draft tree, its attention mask, the timeline, the output
text, benchmark comparisons, the why panel, tree policies, sampling and rejection steps, a knob
sweep, the race, one iteration of a batched run (every row's tree and its padding), the animation
and its one-picture strip (what a reader without a kernel sees)."""

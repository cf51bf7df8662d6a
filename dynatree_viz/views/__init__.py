"""One Plotly figure per module: the draft tree, its attention mask, the timeline, the output
text, benchmark comparisons, the why panel, tree policies, sampling, the race and the animation."""

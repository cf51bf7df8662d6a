"""Helpers the views, widgets and exports share: style and colours, node labels, token text,
tree layout, the drawn scene of one iteration, and Plotly animation controls."""

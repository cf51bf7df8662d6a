"""Figures out of the notebook: HTML and static images, GIFs, static fallbacks for viewers
without JavaScript, and the offline report."""

"""Inverse-dynamics models: frames -> actions, trained on real episodes, used to label generated videos."""

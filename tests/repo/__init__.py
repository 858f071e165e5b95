"""Checks of what ships beside the package: the gates of scripts/test.sh, the GitHub workflows, the Helm
chart and the images."""

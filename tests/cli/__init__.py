"""The command line: decode, compare, bench, the SFT recipes, the live canvas and the replay page."""

"""Tests of the decoding rules: the strategies, their schedules and the zoo, one file per algorithm."""

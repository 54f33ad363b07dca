"""The rows a benchmark prints are the rows the documentation test reads back."""

from __future__ import annotations

import pytest

from hf_neuron.testing.benchmark_tables import print_table_rows, split_table_rows


def test_printed_rows_are_read_back(capsys):
    print("graphs: 2 (tokens equal CPU: True)")
    print_table_rows(row for row in ["| a | 1 |", "| b | 2 |"])
    before, rows = split_table_rows(capsys.readouterr().out)
    assert rows == ["| a | 1 |", "| b | 2 |"]
    assert "tokens equal CPU: True" in before and "| a |" not in before


def test_output_without_rows_says_so():
    with pytest.raises(ValueError, match="printed no 'Table rows:' line"):
        split_table_rows("Traceback (most recent call last): ...")

"""A ticket's cell table marks a share of peak above 100% (issue 17, finding 5)."""

from __future__ import annotations


def test_ticket_table_marks_a_share_over_100_percent():
    from perfbench.tickets import render

    assert render._share(2.62) == "262%↑" and render._share(0.5) == "50%" and render._share(None) == "—"

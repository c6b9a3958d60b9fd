"""The card through the PCIe model (sim/card.py, sim/card_session.py): enumeration, BAR0 identity and
register programs, copies of host memory across the link (reads as tagged requests and completions, writes
posted), a bus error from unbacked host memory, an unsupported BAR read refused."""

from __future__ import annotations

import pytest

from tests.sim.card_harness import run_card

pytestmark = pytest.mark.sim


def test_card_first_light_through_the_pcie_model(tmp_path):
    result = run_card(tmp_path, "sim.card_session", "card_first_light")
    assert result["identity"] == {"num_queues": 4, "slots": 16, "num_regions": 16}
    assert result["copies"] == {"descriptors": 5, "bytes": 8266, "completion_word": 5}
    assert result["unbacked_read"] == "BUS_ERROR"
    assert result["long_read"].startswith("refused")


@pytest.mark.slow
def test_card_first_light_with_the_cards_own_reads_in_flight(tmp_path):
    """The card's engine as shipped keeps 128 reads in flight (the tests' card: 16); its read tracker and requester
    then convert to ~12 MB of Verilog, about 8 minutes to build on two cores, hence `slow`."""
    from sim.card import card_params

    ro = card_params().reads_outstanding
    assert ro == 128
    result = run_card(tmp_path, "sim.card_session", "card_first_light", reads_outstanding=ro)
    assert result["copies"] == {"descriptors": 5, "bytes": 8266, "completion_word": 5}
    assert result["unbacked_read"] == "BUS_ERROR"


def test_card_window_takes_descriptors_however_the_writes_are_cut(tmp_path):
    # straight into the window a CQ beat a cycle: byte enables, writes straddling slots, partial overwrites
    result = run_card(tmp_path, "sim.card_session", "card_window_writes")
    assert result == {"descriptors": 8, "bytes": 5312, "pieces": 11}


def test_512_bit_card_first_light_at_gen3x16(tmp_path):
    """The 512-bit card (512-bit engine and streams) behind the block model at Gen3 x16: enumeration, BAR0's
    registers (CC completions of one beat with is_sop/is_eop), copies checked byte for byte, the bus error."""
    result = run_card(tmp_path, "sim.card_session", "card_first_light", data_width=512)
    assert result["identity"] == {"num_queues": 4, "slots": 16, "num_regions": 16}
    assert result["copies"] == {"descriptors": 5, "bytes": 8266, "completion_word": 5}
    assert result["unbacked_read"] == "BUS_ERROR"
    assert result["long_read"].startswith("refused")


def test_512_bit_card_window_takes_descriptors_however_the_writes_are_cut(tmp_path):
    result = run_card(tmp_path, "sim.card_session", "card_window_writes", data_width=512)
    assert result == {"descriptors": 8, "bytes": 5312, "pieces": 11}

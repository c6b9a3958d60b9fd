"""`arkdma sim`: the hardware engine in simulation (Verilator + cocotb): `sim bench`, `sim waves`, `sim fuzz`,
`sim board`."""

from __future__ import annotations

import argparse

from arkdma_cli import sim_board, sim_fuzz
from arkdma_cli.arguments import byte_sizes, clock_mhz, input_file, nanoseconds, output_file, positive_int
from arkdma_cli.rtl import add_param_options, params_from
from driver.errors import ArkdmaError


def register(sub) -> None:
    p = sub.add_parser("sim", help="the hardware engine in simulation (Verilator + cocotb): benchmark, waveforms, generated scenarios")
    ssub = p.add_subparsers(dest="sim_command", required=True, metavar="ACTION")
    _register_bench(ssub)
    _register_waves(ssub)
    sim_fuzz.register(ssub)
    sim_board.register(ssub)


def _register_bench(ssub) -> None:
    b = ssub.add_parser(
        "bench", help="throughput against message size and one-descriptor latency of the simulated engine",
        description="Simulates the engine (Verilator, cocotb bus models, host memory with the given round trip) and "
                    "measures: sustained throughput of back-to-back descriptors per message size, one-descriptor "
                    "latency (doorbell -> completion counter write), doorbell -> first read request, per-descriptor "
                    "overhead beyond the memory round trips, descriptors accepted per cycle; and prints a modelled "
                    "end-to-end GPU-driven latency for one 8 KiB D2H descriptor. Times are simulated clock.")
    b.add_argument("--json", type=output_file, required=True, metavar="FILE",
                   help="JSON to write; the PNG plot goes beside it")
    b.add_argument("--clock-mhz", type=clock_mhz, default=None, help="engine clock (default 250)")
    b.add_argument("--round-trip-ns", type=nanoseconds, default=None,
                   help="memory round trip: read address -> first data, last write beat -> write response (default 1770)")
    b.add_argument("--sizes", type=byte_sizes, default=None, help="bytes per descriptor, comma-separated "
                   "(default 64,256,1024,4096,8192,65536,1048576)")
    b.add_argument("--total-bytes", type=positive_int, default=None, help="bytes streamed per size (default 4 MiB)")
    b.add_argument("--min-descriptors", type=positive_int, default=None,
                   help="at least this many descriptors per size, whatever --total-bytes says (default 4)")
    card = b.add_argument_group(
        "the whole card", "--card simulates the engine behind its PCIe front end through cocotbext-pcie's "
        "UltraScale+ block model and root complex (host memory answers reads after --round-trip-ns); rows per "
        "link and size, line_rate_fraction of the link's payload-limited rate")
    card.add_argument("--card", action="store_true", help="bench the whole card through the PCIe model")
    card.add_argument("--link", type=_links, default=None, metavar="LINKS",
                      help="comma-separated links: gen2x8, gen2x16, gen3x4, gen3x8, gen4x2, gen4x4 (the 256-bit "
                           "card; default gen3x8) or gen3x16, gen4x8 (the 512-bit card, taken when --data-width is "
                           "not given)")
    card.add_argument("--mps", type=int, default=None, metavar="BYTES", choices=(128, 256, 512, 1024),
                      help="the host's Max Payload Size, set in the card at enumeration: 128 (default), 256, 512 or "
                           "1024; writes are cut to it and the link's payload-limited rate counts it")
    card.add_argument("--mrrs", type=int, default=None, metavar="BYTES", choices=(128, 256, 512, 1024, 2048, 4096),
                      help="the card's Max Read Request Size, set by the host after enumeration: 128 to 4096 "
                           "(default 512, Device Control's reset value); reads are cut to it")
    card.add_argument("--plot", type=output_file, default=None, metavar="FILE",
                      help="PNG to write (default: beside the JSON)")
    card.add_argument("--quick", action="store_true",
                      help="a CI-sized run: sizes 64,4096,8192,65536 and 16 KiB streamed per size")
    card.add_argument("--store-bytes", type=int, default=None, metavar="N",
                      help="descriptors written into the window N bytes a posted write, as a GPU thread's stores "
                           "(default 16, device.cuh's write_slot); 0: one write a batch, cut at the root complex's "
                           "max payload size")
    add_param_options(b)
    b.set_defaults(func=run_bench)


def _links(text: str):
    from sim.card_bench_link import LinkError, parse_links

    try:
        return parse_links(text)
    except LinkError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


CARD_ONLY = ("link", "mps", "mrrs", "plot", "quick", "store_bytes")


def run_bench(args: argparse.Namespace) -> int:
    from sim.toolchain import missing

    if not args.card:
        given = [f"--{name.replace('_', '-')}" for name in CARD_ONLY
                 if getattr(args, name) is not None and getattr(args, name) is not False]
        if given:
            raise ArkdmaError(f"{', '.join(given)} belong to the card bench: add --card (the engine bench writes "
                              "its plot beside the JSON)")
    elif args.clock_mhz is not None:
        raise ArkdmaError("--clock-mhz does not apply to --card: the card runs at its link's user clock (--link)")
    reason = missing()
    if reason:
        raise ArkdmaError(f"cannot simulate here: {reason}")
    if args.card:
        return _run_card_bench(args)
    from sim.bench import BenchConfig, run_and_report

    given = {k: getattr(args, k) for k in ("clock_mhz", "round_trip_ns", "sizes", "total_bytes", "min_descriptors")
             if getattr(args, k) is not None}
    try:
        config = BenchConfig(params=params_from(args), **given)
    except ValueError as exc:
        raise ArkdmaError(f"bench settings rejected: {exc}") from exc
    return run_and_report(config, args.json)


def _register_waves(ssub) -> None:
    w = ssub.add_parser(
        "waves", help="per-descriptor timing from a VCD of the engine: doorbell -> first read -> last write "
                      "response -> counter write, and throughput",
        description="Reads a VCD recorded with ARKDMA_WAVES=1 (any simulation: tests, demo, bench) and prints, per "
                    "descriptor, the cycles from its doorbell to its first read request, to the response of its last "
                    "write burst and to the completion-counter write that covers it; then the interval summary and "
                    "the payload throughput from the first doorbell to the last counter write (or --start/--end).")
    w.add_argument("vcd", type=input_file, metavar="FILE.vcd", help="waveform of the arkdma_engine top level")
    w.add_argument("--slots", type=positive_int, default=None,
                   help="window slots per queue (default: read from the driver's identity reads in the VCD)")
    w.add_argument("--start", type=int, default=None, metavar="CYCLE", help="throughput window start")
    w.add_argument("--end", type=int, default=None, metavar="CYCLE", help="throughput window end (exclusive)")
    w.add_argument("--rows", type=int, default=50, help="descriptor rows to print (default 50; 0: all)")
    w.add_argument("--json", type=output_file, default=None, metavar="FILE", help="also write the timings as JSON")
    w.set_defaults(func=run_waves)


def run_waves(args: argparse.Namespace) -> int:
    import json

    from rich.console import Console

    try:
        from sim.waves import WaveformError, measure, print_report
    except ImportError as exc:
        raise ArkdmaError(f"{exc.name} is missing: pip install 'arkdma[hw]' (or run ./dev)") from exc
    try:
        report = measure(args.vcd, slots=args.slots)
    except WaveformError as exc:
        raise ArkdmaError(str(exc)) from exc
    print_report(report, Console(), limit=args.rows or None, start=args.start, end=args.end)
    if args.json:
        tp = report.throughput(args.start, args.end)
        args.json.write_text(json.dumps({
            "period_ns": report.period_ns, "data_bytes": report.data_bytes, "summary": report.summary(),
            "throughput": {"start": tp.start, "end": tp.end, "payload_bytes": tp.payload_bytes,
                           "descriptors": tp.descriptors, "gbps": tp.gbps},
            "descriptors": [d.as_dict() for d in report.descriptors]}, indent=1))
    return 0


def _run_card_bench(args: argparse.Namespace) -> int:
    import dataclasses

    from rtl.params import EngineParams
    from sim.card_bench import QUICK_SIZES, QUICK_TOTAL_BYTES, CardBenchConfig, card_params
    from sim.card_bench_report import run_and_report

    given = {k: getattr(args, k) for k in ("round_trip_ns", "sizes", "total_bytes", "min_descriptors", "store_bytes")
             if getattr(args, k) is not None}
    if args.quick:
        given = {"sizes": QUICK_SIZES, "total_bytes": QUICK_TOTAL_BYTES, **given}
    if args.link:
        given["links"] = args.link
    host_set = {k: v for k, v in (("max_payload_bytes", args.mps), ("max_read_request_bytes", args.mrrs))
                if v is not None}
    if host_set:
        given["links"] = tuple(dataclasses.replace(link, **host_set)
                               for link in given.get("links", CardBenchConfig().links))
    engine = {f.name: getattr(args, f.name) for f in dataclasses.fields(EngineParams)
              if getattr(args, f.name, None) is not None}
    if "data_width" not in engine and args.link and all(link.interface_bits == 512 for link in args.link):
        engine["data_width"] = 512  # the card built for the 512-bit interface those links run
    try:
        config = CardBenchConfig(params=card_params(**engine), **given)
    except ValueError as exc:
        raise ArkdmaError(f"card bench settings rejected: {exc}") from exc
    return run_and_report(config, args.json, args.plot or args.json.with_suffix(".png"))

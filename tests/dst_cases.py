"""The DST table: cron schedules around every transition we promise, worked out by hand.

Each case: a zone, a cron expression, a DST policy, an instant to start after, and
the next occurrences in UTC. The comments give the local wall-clock reading and
the offset of each expected instant, so that a reader can check them without a
computer. Used by the domain tests, and by the API and CLI tests, which must
agree with it and with each other.

Transitions (2026 unless noted):
- America/New_York: spring 8 Mar 02:00 EST (-5) -> 03:00 EDT (-4), at 07:00Z;
  fall 1 Nov 02:00 EDT -> 01:00 EST, at 06:00Z (01:00-01:59 happens twice).
- Europe/Berlin: spring 29 Mar 02:00 CET (+1) -> 03:00 CEST (+2), at 01:00Z;
  fall 25 Oct 03:00 CEST -> 02:00 CET, at 01:00Z (02:00-02:59 twice).
- Australia/Lord_Howe (30-minute DST): spring 4 Oct 02:00 (+10:30) -> 02:30 (+11),
  at 3 Oct 15:30Z; fall 5 Apr 02:00 (+11) -> 01:30 (+10:30), at 4 Apr 15:00Z
  (01:30-01:59 twice).
- Asia/Kathmandu (+05:45): no DST. Its one transition: 1 Jan 1986 00:00 (+05:30)
  -> 00:15 (+05:45), at 1985-12-31T18:30Z (00:00-00:14 never happened).
"""

from __future__ import annotations

from dataclasses import dataclass

NY = "America/New_York"
BERLIN = "Europe/Berlin"
LORD_HOWE = "Australia/Lord_Howe"
KATHMANDU = "Asia/Kathmandu"


@dataclass(frozen=True)
class DstCase:
    name: str
    zone: str
    cron: str
    after: str
    expected: tuple[str, ...]
    nonexistent: str = "shift"
    ambiguous: str = "first"

    @property
    def dst(self) -> dict[str, str]:
        return {"nonexistent": self.nonexistent, "ambiguous": self.ambiguous}


def _z(*instants: str) -> tuple[str, ...]:
    return tuple(f"{i}:00.000Z" for i in instants)


CASES = [
    # ---- America/New_York, spring forward (02:00-02:59 does not exist) ----
    DstCase(
        "ny-spring-hourly-shift",
        NY,
        "0 * * * *",
        "2026-03-08T05:30:00Z",
        # 01:00 EST; 02:00 shifted to 03:00 EDT, the same instant as 03:00 EDT: runs once; 04:00 EDT
        _z("2026-03-08T06:00", "2026-03-08T07:00", "2026-03-08T08:00"),
    ),
    DstCase(
        "ny-spring-hourly-skip",
        NY,
        "0 * * * *",
        "2026-03-08T05:30:00Z",
        # 01:00 EST; 02:00 skipped; 03:00 EDT; 04:00 EDT (same instants as shift)
        _z("2026-03-08T06:00", "2026-03-08T07:00", "2026-03-08T08:00"),
        nonexistent="skip",
    ),
    DstCase(
        "ny-spring-daily-shift",
        NY,
        "30 2 * * *",
        "2026-03-07T12:00:00Z",
        # 8 Mar 02:30 does not exist: 03:00 EDT (07:00Z); 9 Mar 02:30 EDT
        _z("2026-03-08T07:00", "2026-03-09T06:30"),
    ),
    DstCase(
        "ny-spring-daily-skip",
        NY,
        "30 2 * * *",
        "2026-03-07T12:00:00Z",
        # 8 Mar skipped; 9 and 10 Mar 02:30 EDT
        _z("2026-03-09T06:30", "2026-03-10T06:30"),
        nonexistent="skip",
    ),
    DstCase(
        "ny-spring-15min-shift",
        NY,
        "*/15 * * * *",
        "2026-03-08T06:40:00Z",
        # 01:45 EST; 02:00-02:45 all shift to 03:00 EDT (one run); 03:15 EDT
        _z("2026-03-08T06:45", "2026-03-08T07:00", "2026-03-08T07:15"),
    ),
    DstCase(
        "ny-spring-15min-skip",
        NY,
        "*/15 * * * *",
        "2026-03-08T06:40:00Z",
        # 01:45 EST; 02:xx skipped; 03:00 EDT; 03:15 EDT
        _z("2026-03-08T06:45", "2026-03-08T07:00", "2026-03-08T07:15"),
        nonexistent="skip",
    ),
    # ---- America/New_York, fall back (01:00-01:59 twice: EDT, then EST) ----
    DstCase(
        "ny-fall-hourly-first",
        NY,
        "0 * * * *",
        "2026-11-01T04:30:00Z",
        # 01:00 EDT; (01:00 EST not run); 02:00 EST; 03:00 EST
        _z("2026-11-01T05:00", "2026-11-01T07:00", "2026-11-01T08:00"),
    ),
    DstCase(
        "ny-fall-hourly-last",
        NY,
        "0 * * * *",
        "2026-11-01T04:30:00Z",
        # (01:00 EDT not run); 01:00 EST; 02:00 EST; 03:00 EST
        _z("2026-11-01T06:00", "2026-11-01T07:00", "2026-11-01T08:00"),
        ambiguous="last",
    ),
    DstCase(
        "ny-fall-hourly-both",
        NY,
        "0 * * * *",
        "2026-11-01T04:30:00Z",
        # 01:00 EDT; 01:00 EST; 02:00 EST: one run per elapsed hour
        _z("2026-11-01T05:00", "2026-11-01T06:00", "2026-11-01T07:00"),
        ambiguous="both",
    ),
    DstCase(
        "ny-fall-daily-first",
        NY,
        "30 1 * * *",
        "2026-10-31T12:00:00Z",
        # 1 Nov 01:30 EDT; 2 Nov 01:30 EST
        _z("2026-11-01T05:30", "2026-11-02T06:30"),
    ),
    DstCase(
        "ny-fall-daily-last",
        NY,
        "30 1 * * *",
        "2026-10-31T12:00:00Z",
        # 1 Nov 01:30 EST; 2 Nov 01:30 EST
        _z("2026-11-01T06:30", "2026-11-02T06:30"),
        ambiguous="last",
    ),
    DstCase(
        "ny-fall-daily-both",
        NY,
        "30 1 * * *",
        "2026-10-31T12:00:00Z",
        # 1 Nov 01:30 EDT and 01:30 EST; 2 Nov 01:30 EST
        _z("2026-11-01T05:30", "2026-11-01T06:30", "2026-11-02T06:30"),
        ambiguous="both",
    ),
    DstCase(
        "ny-fall-15min-first",
        NY,
        "*/15 * * * *",
        "2026-11-01T05:10:00Z",
        # 01:15, 01:30, 01:45 EDT; the EST repeats are not run; 02:00 EST
        _z("2026-11-01T05:15", "2026-11-01T05:30", "2026-11-01T05:45", "2026-11-01T07:00"),
    ),
    DstCase(
        "ny-fall-15min-last",
        NY,
        "*/15 * * * *",
        "2026-11-01T05:10:00Z",
        # the EDT passes are not run: 01:00, 01:15, 01:30, 01:45 EST; 02:00 EST
        _z("2026-11-01T06:00", "2026-11-01T06:15", "2026-11-01T06:30", "2026-11-01T06:45"),
        ambiguous="last",
    ),
    DstCase(
        "ny-fall-15min-both",
        NY,
        "*/15 * * * *",
        "2026-11-01T05:10:00Z",
        # 01:15, 01:30, 01:45 EDT; 01:00, 01:15 EST: every 15 elapsed minutes
        _z(
            "2026-11-01T05:15",
            "2026-11-01T05:30",
            "2026-11-01T05:45",
            "2026-11-01T06:00",
            "2026-11-01T06:15",
        ),
        ambiguous="both",
    ),
    # ---- Europe/Berlin, spring forward (02:00-02:59 does not exist) ----
    DstCase(
        "berlin-spring-hourly-shift",
        BERLIN,
        "0 * * * *",
        "2026-03-29T00:30:00Z",
        # 02:00 shifted to 03:00 CEST = 03:00 CEST (one run); 04:00, 05:00 CEST
        _z("2026-03-29T01:00", "2026-03-29T02:00", "2026-03-29T03:00"),
    ),
    DstCase(
        "berlin-spring-daily-shift",
        BERLIN,
        "30 2 * * *",
        "2026-03-28T12:00:00Z",
        # 29 Mar 02:30 does not exist: 03:00 CEST (01:00Z); 30 Mar 02:30 CEST
        _z("2026-03-29T01:00", "2026-03-30T00:30"),
    ),
    DstCase(
        "berlin-spring-daily-skip",
        BERLIN,
        "30 2 * * *",
        "2026-03-28T12:00:00Z",
        # 29 Mar skipped; 30 and 31 Mar 02:30 CEST
        _z("2026-03-30T00:30", "2026-03-31T00:30"),
        nonexistent="skip",
    ),
    DstCase(
        "berlin-spring-15min-shift",
        BERLIN,
        "*/15 * * * *",
        "2026-03-29T00:40:00Z",
        # 01:45 CET; 02:xx shift to 03:00 CEST (one run); 03:15 CEST
        _z("2026-03-29T00:45", "2026-03-29T01:00", "2026-03-29T01:15"),
    ),
    # ---- Europe/Berlin, fall back (02:00-02:59 twice: CEST, then CET) ----
    DstCase(
        "berlin-fall-hourly-first",
        BERLIN,
        "0 * * * *",
        "2026-10-24T23:30:00Z",
        # 02:00 CEST; (02:00 CET not run); 03:00 CET; 04:00 CET
        _z("2026-10-25T00:00", "2026-10-25T02:00", "2026-10-25T03:00"),
    ),
    DstCase(
        "berlin-fall-hourly-last",
        BERLIN,
        "0 * * * *",
        "2026-10-24T23:30:00Z",
        # 02:00 CET; 03:00 CET; 04:00 CET
        _z("2026-10-25T01:00", "2026-10-25T02:00", "2026-10-25T03:00"),
        ambiguous="last",
    ),
    DstCase(
        "berlin-fall-hourly-both",
        BERLIN,
        "0 * * * *",
        "2026-10-24T23:30:00Z",
        # 02:00 CEST; 02:00 CET; 03:00 CET
        _z("2026-10-25T00:00", "2026-10-25T01:00", "2026-10-25T02:00"),
        ambiguous="both",
    ),
    DstCase(
        "berlin-fall-daily-first",
        BERLIN,
        "30 2 * * *",
        "2026-10-24T12:00:00Z",
        # 25 Oct 02:30 CEST; 26 Oct 02:30 CET
        _z("2026-10-25T00:30", "2026-10-26T01:30"),
    ),
    DstCase(
        "berlin-fall-daily-last",
        BERLIN,
        "30 2 * * *",
        "2026-10-24T12:00:00Z",
        # 25 Oct 02:30 CET; 26 Oct 02:30 CET
        _z("2026-10-25T01:30", "2026-10-26T01:30"),
        ambiguous="last",
    ),
    DstCase(
        "berlin-fall-daily-both",
        BERLIN,
        "30 2 * * *",
        "2026-10-24T12:00:00Z",
        # 25 Oct 02:30 CEST and 02:30 CET; 26 Oct 02:30 CET
        _z("2026-10-25T00:30", "2026-10-25T01:30", "2026-10-26T01:30"),
        ambiguous="both",
    ),
    DstCase(
        "berlin-fall-15min-first",
        BERLIN,
        "*/15 * * * *",
        "2026-10-25T00:40:00Z",
        # 02:45 CEST; the CET repeats are not run; 03:00 CET; 03:15 CET
        _z("2026-10-25T00:45", "2026-10-25T02:00", "2026-10-25T02:15"),
    ),
    DstCase(
        "berlin-fall-15min-both",
        BERLIN,
        "*/15 * * * *",
        "2026-10-25T00:40:00Z",
        # 02:45 CEST; 02:00 CET; 02:15 CET
        _z("2026-10-25T00:45", "2026-10-25T01:00", "2026-10-25T01:15"),
        ambiguous="both",
    ),
    # ---- Australia/Lord_Howe, spring forward (02:00-02:29 does not exist) ----
    DstCase(
        "lordhowe-spring-hourly-shift",
        LORD_HOWE,
        "0 * * * *",
        "2026-10-03T14:00:00Z",
        # 01:00 (+10:30); 02:00 shifted to 02:30 (+11); 03:00 (+11)
        _z("2026-10-03T14:30", "2026-10-03T15:30", "2026-10-03T16:00"),
    ),
    DstCase(
        "lordhowe-spring-hourly-skip",
        LORD_HOWE,
        "0 * * * *",
        "2026-10-03T14:00:00Z",
        # 01:00 (+10:30); 02:00 skipped; 03:00, 04:00 (+11)
        _z("2026-10-03T14:30", "2026-10-03T16:00", "2026-10-03T17:00"),
        nonexistent="skip",
    ),
    DstCase(
        "lordhowe-spring-daily-shift",
        LORD_HOWE,
        "0 2 * * *",
        "2026-10-03T00:00:00Z",
        # 4 Oct 02:00 does not exist: 02:30 (+11); 5 Oct 02:00 (+11)
        _z("2026-10-03T15:30", "2026-10-04T15:00"),
    ),
    DstCase(
        "lordhowe-spring-daily-skip",
        LORD_HOWE,
        "0 2 * * *",
        "2026-10-03T00:00:00Z",
        # 4 Oct skipped; 5 and 6 Oct 02:00 (+11)
        _z("2026-10-04T15:00", "2026-10-05T15:00"),
        nonexistent="skip",
    ),
    DstCase(
        "lordhowe-spring-15min-shift",
        LORD_HOWE,
        "*/15 * * * *",
        "2026-10-03T15:10:00Z",
        # 01:45 (+10:30); 02:00 and 02:15 shift to 02:30 (+11), as does 02:30 itself; 02:45
        _z("2026-10-03T15:15", "2026-10-03T15:30", "2026-10-03T15:45"),
    ),
    DstCase(
        "lordhowe-spring-15min-skip",
        LORD_HOWE,
        "*/15 * * * *",
        "2026-10-03T15:10:00Z",
        # 01:45 (+10:30); 02:00, 02:15 skipped; 02:30, 02:45 (+11)
        _z("2026-10-03T15:15", "2026-10-03T15:30", "2026-10-03T15:45"),
        nonexistent="skip",
    ),
    # ---- Australia/Lord_Howe, fall back (01:30-01:59 twice: +11, then +10:30) ----
    DstCase(
        "lordhowe-fall-hourly-untouched",
        LORD_HOWE,
        "0 * * * *",
        "2026-04-04T13:30:00Z",
        # 01:00 (+11) is before the fold, 02:00 (+10:30) after it: 90 minutes apart
        _z("2026-04-04T14:00", "2026-04-04T15:30", "2026-04-04T16:30"),
        ambiguous="both",
    ),
    DstCase(
        "lordhowe-fall-hourly-first",
        LORD_HOWE,
        "30 * * * *",
        "2026-04-04T13:45:00Z",
        # 01:30 (+11); (01:30 +10:30 not run); 02:30 (+10:30)
        _z("2026-04-04T14:30", "2026-04-04T16:00"),
    ),
    DstCase(
        "lordhowe-fall-hourly-last",
        LORD_HOWE,
        "30 * * * *",
        "2026-04-04T13:45:00Z",
        # 01:30 (+10:30); 02:30 (+10:30)
        _z("2026-04-04T15:00", "2026-04-04T16:00"),
        ambiguous="last",
    ),
    DstCase(
        "lordhowe-fall-hourly-both",
        LORD_HOWE,
        "30 * * * *",
        "2026-04-04T13:45:00Z",
        # 01:30 (+11); 01:30 (+10:30); 02:30 (+10:30)
        _z("2026-04-04T14:30", "2026-04-04T15:00", "2026-04-04T16:00"),
        ambiguous="both",
    ),
    DstCase(
        "lordhowe-fall-daily-first",
        LORD_HOWE,
        "45 1 * * *",
        "2026-04-04T00:00:00Z",
        # 5 Apr 01:45 (+11); 6 Apr 01:45 (+10:30)
        _z("2026-04-04T14:45", "2026-04-05T15:15"),
    ),
    DstCase(
        "lordhowe-fall-daily-last",
        LORD_HOWE,
        "45 1 * * *",
        "2026-04-04T00:00:00Z",
        # 5 Apr 01:45 (+10:30); 6 Apr 01:45 (+10:30)
        _z("2026-04-04T15:15", "2026-04-05T15:15"),
        ambiguous="last",
    ),
    DstCase(
        "lordhowe-fall-daily-both",
        LORD_HOWE,
        "45 1 * * *",
        "2026-04-04T00:00:00Z",
        # 5 Apr 01:45 (+11) and (+10:30); 6 Apr 01:45 (+10:30)
        _z("2026-04-04T14:45", "2026-04-04T15:15", "2026-04-05T15:15"),
        ambiguous="both",
    ),
    DstCase(
        "lordhowe-fall-15min-first",
        LORD_HOWE,
        "*/15 * * * *",
        "2026-04-04T14:20:00Z",
        # 01:30, 01:45 (+11); repeats not run; 02:00 (+10:30)
        _z("2026-04-04T14:30", "2026-04-04T14:45", "2026-04-04T15:30"),
    ),
    DstCase(
        "lordhowe-fall-15min-last",
        LORD_HOWE,
        "*/15 * * * *",
        "2026-04-04T14:20:00Z",
        # 01:30, 01:45 (+10:30); 02:00 (+10:30)
        _z("2026-04-04T15:00", "2026-04-04T15:15", "2026-04-04T15:30"),
        ambiguous="last",
    ),
    DstCase(
        "lordhowe-fall-15min-both",
        LORD_HOWE,
        "*/15 * * * *",
        "2026-04-04T14:20:00Z",
        # 01:30, 01:45 (+11); 01:30, 01:45 (+10:30); 02:00 (+10:30)
        _z(
            "2026-04-04T14:30",
            "2026-04-04T14:45",
            "2026-04-04T15:00",
            "2026-04-04T15:15",
            "2026-04-04T15:30",
        ),
        ambiguous="both",
    ),
    # ---- Asia/Kathmandu (+05:45, no DST) ----
    DstCase(
        "kathmandu-hourly",
        KATHMANDU,
        "0 * * * *",
        "2026-06-01T00:00:00Z",
        # 06:00, 07:00, 08:00 (+05:45): a quarter past each UTC hour
        _z("2026-06-01T00:15", "2026-06-01T01:15", "2026-06-01T02:15"),
    ),
    DstCase(
        "kathmandu-daily",
        KATHMANDU,
        "0 9 * * *",
        "2026-06-01T00:00:00Z",
        # 09:00 (+05:45) = 03:15Z, each day
        _z("2026-06-01T03:15", "2026-06-02T03:15"),
    ),
    DstCase(
        "kathmandu-15min",
        KATHMANDU,
        "*/15 * * * *",
        "2026-06-01T00:05:00Z",
        # 05:55 local now; 06:00, 06:15, 06:30 (+05:45)
        _z("2026-06-01T00:15", "2026-06-01T00:30", "2026-06-01T00:45"),
    ),
    DstCase(
        "kathmandu-1986-15min-shift",
        KATHMANDU,
        "*/15 * * * *",
        "1985-12-31T18:00:00Z",
        # 23:45 (+05:30); 00:00 does not exist: 00:15 (+05:45), as is 00:15 itself; 00:30
        _z("1985-12-31T18:15", "1985-12-31T18:30", "1985-12-31T18:45"),
    ),
    DstCase(
        "kathmandu-1986-daily-shift",
        KATHMANDU,
        "0 0 * * *",
        "1985-12-31T00:00:00Z",
        # 1 Jan 00:00 does not exist: 00:15 (+05:45); 2 Jan 00:00 (+05:45)
        _z("1985-12-31T18:30", "1986-01-01T18:15"),
    ),
    DstCase(
        "kathmandu-1986-daily-skip",
        KATHMANDU,
        "0 0 * * *",
        "1985-12-31T00:00:00Z",
        # 1 Jan skipped; 2 and 3 Jan 00:00 (+05:45)
        _z("1986-01-01T18:15", "1986-01-02T18:15"),
        nonexistent="skip",
    ),
]

"""Upkeep on a calendar: the jobs (hourly, nightly, weekly, monthly) and the calendar.

``memory/jobs/base.py`` is the contract between the calendar (which decides
when a job runs, holds its lease and records its runs) and the job bodies
(which decide what a run changes). See "Upkeep on a calendar" in
docs/DESIGN.md.
"""

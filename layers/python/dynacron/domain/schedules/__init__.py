"""Schedules: cron, rate, one-time, fixed-delay and after; wall-clock time across
daylight saving; previews, descriptions and forecasts."""

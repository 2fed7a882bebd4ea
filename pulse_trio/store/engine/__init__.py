"""The store's engine: connections, transactions and the one writer of chart state, shared by every chart.

Connections (``writer``: which node of a multi-host URL; ``pool``), the
blocking runner (``facade``) and its Trio face (``trio_bridge``, the one
store module that imports Trio); the open transaction (``tx``); the
registry of transition functions and guards (``registry``, with each
chart's guard context in ``guard_context``) and the guarded writer of every
state change (``chart_write``); the timers' claim scaffold (``timer_scan``);
and the values the charts' functions take and give (``inputs``, ``rows``,
``results``, ``codes``, ``ids``). Nothing here belongs to one chart, and
nothing here imports a chart package.
"""

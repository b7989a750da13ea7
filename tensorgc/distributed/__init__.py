"""Distributed jobs: gather_report and publish_reports (ranks.py) over one rank's summary, the
collective, the store writer and the reading of the other ranks' summaries (_summaries.py, which
imports no reporter, so that MemReporter uses it too), and several ranks' snapshots side by side
(ranks_page.py: ``tensorgc stats DIR``, ``tensorgc timeline DIR``). This process's rank is
_common/rank.py's.
"""

"""Forward triggers (issue 22): a day a person named ahead comes back on that day.

``detect`` finds the days ahead in a message and the cancellations ("never mind,
the wedding is off"); ``models`` is the table (migration 0020); ``repo`` its reads
and writes; ``stages`` the after-turn scan and the "Today" context block.
"""

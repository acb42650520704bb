"""Observation: the memory the agent keeps about people, in one place.

``types`` (the observation, its priority and category, the observer,
reflector and sink contracts), ``guards`` (the system's own words never
observed, huge messages split), ``rules`` (the rule-based observer and
reflector), ``llm`` (the utility model's), ``block`` (the OBSERVATIONS prompt
block), ``log`` (the tables: observations, cursor, runs), ``run`` (when a pass
runs and what it does) and ``sink`` (observations into the memory layer's
item store). Dates people refer to are read by ``memory.timeparse``, the
pack's parser. See docs/DESIGN.md, "Observation in one package".
"""

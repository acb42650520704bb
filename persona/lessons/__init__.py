"""Lessons from corrections (issue 22): short imperatives the agent learns when a
person corrects it or the judge finds a mistake, kept per person (or for everyone)
and always in the cached prefix of the prompt."""

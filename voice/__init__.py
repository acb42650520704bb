"""Speech to text and text to speech, off the event loop."""

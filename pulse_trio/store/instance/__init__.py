"""Charts ``instance`` and ``node``: worker sessions (``instances``) and the serve processes holding them (``nodes``)."""

"""The faces: command line, HTTP service, Ray Data, file jobs, explore, parity. May import anything below;
nothing imports apps."""

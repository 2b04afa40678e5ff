from .plots import main

main()

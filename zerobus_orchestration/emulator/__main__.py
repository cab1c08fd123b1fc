from zerobus_orchestration.emulator.serve import main

main()

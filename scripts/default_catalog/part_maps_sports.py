from common import API_KEY, LIMIT, A, B, I, N, O, R, S, api, tool

LAT = N("Latitude in decimal degrees.", minimum=-90, maximum=90)
LON = N("Longitude in decimal degrees.", minimum=-180, maximum=180)
MODE = S("Travel mode.", enum=["driving", "walking", "cycling", "transit"], default="driving")

MAPS = tool("WayFinder Maps", "Maps",
    "Maps and location services: geocoding, routes, travel times, places of interest and live traffic.",
    [
        api("geocode_address", "Turn a street address or landmark name into latitude/longitude coordinates.",
            {"api_key": API_KEY, "address": S("Address or place name."), "country": S("ISO country code to bias results.")},
            ["api_key", "address"], R(latitude=N("Latitude."), longitude=N("Longitude."), formatted_address=S("Normalised address."))),
        api("reverse_geocode", "Find the street address at given coordinates.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON}, ["api_key", "latitude", "longitude"],
            R(formatted_address=S("Address."), city=S("City."), country=S("Country."))),
        api("get_directions", "Step-by-step route between two places by car, foot, bike or public transport.",
            {"api_key": API_KEY, "origin": S("Start address or 'lat,lon'."), "destination": S("End address or 'lat,lon'."), "mode": MODE,
             "avoid": A(S("Feature.", enum=["tolls", "highways", "ferries"]), "Things to avoid."), "depart_at": S("ISO 8601 time.")},
            ["api_key", "origin", "destination"],
            R(distance_km=N("Route length."), duration_min=N("Travel time."), steps=A(S("Instruction."), "Turn-by-turn steps."))),
        api("distance_matrix", "Travel times and distances between several origins and destinations at once.",
            {"api_key": API_KEY, "origins": A(S("Address."), "Starts."), "destinations": A(S("Address."), "Ends."), "mode": MODE},
            ["api_key", "origins", "destinations"], R(rows=A(A(O("Cell.", duration_min=N("Minutes."), distance_km=N("Km.")), "Row."), "Matrix."))),
        api("nearby_search", "Places of a type around a point: restaurants, pharmacies, petrol stations, ATMs, parking.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON, "radius_m": I("Search radius in metres.", default=1000),
             "place_type": S("Category of place."), "open_now": B("Only places open now.", default=False), "limit": LIMIT},
            ["api_key", "latitude", "longitude"],
            R(places=A(O("Place.", place_id=S("Place id."), name=S("Name."), distance_m=I("Distance.")), "Places."))),
        api("search_places", "Text search for businesses and points of interest, e.g. 'vegan bakery in Leeds'.",
            {"api_key": API_KEY, "query": S("What and where."), "limit": LIMIT}, ["api_key", "query"],
            R(places=A(O("Place.", place_id=S("Place id."), name=S("Name."), address=S("Address.")), "Places."))),
        api("place_details", "Opening hours, phone number, website, rating and reviews of a place.",
            {"api_key": API_KEY, "place_id": S("Place id.")}, ["api_key", "place_id"],
            R(place_id=S("Id."), opening_hours=A(S("Day and hours."), "Hours."), phone=S("Phone."), rating=N("Stars."))),
        api("traffic_conditions", "Live congestion, incidents and road closures along a road or around a point.",
            {"api_key": API_KEY, "latitude": LAT, "longitude": LON, "radius_m": I("Radius.", default=5000)},
            ["api_key", "latitude", "longitude"], R(incidents=A(O("Incident.", type=S("Kind."), delay_min=N("Delay.")), "Incidents."))),
    ])

SPORTS = tool("ScoreBoard Live", "Sports",
    "Live sports data for football, basketball, tennis and more: scores, fixtures, tables and player statistics.",
    [
        api("list_leagues", "Competitions covered for a sport and country, with season ids.",
            {"api_key": API_KEY, "sport": S("Sport.", enum=["football", "basketball", "tennis", "ice_hockey", "cricket"]), "country": S("Country.")},
            ["api_key", "sport"], R(leagues=A(O("League.", league_id=S("Id."), name=S("Name."), season=S("Current season.")), "Leagues."))),
        api("live_scores", "Scores of matches being played right now, optionally for one league.",
            {"api_key": API_KEY, "sport": S("Sport."), "league_id": S("League filter.")}, ["api_key"],
            R(matches=A(O("Match.", match_id=S("Id."), home=S("Home team."), away=S("Away team."), score=S("Score."), minute=I("Minute.")), "Live."))),
        api("search_team", "Find a club or national team by name.",
            {"api_key": API_KEY, "name": S("Team name.")}, ["api_key", "name"],
            R(teams=A(O("Team.", team_id=S("Team id."), name=S("Name."), league_id=S("League.")), "Teams."))),
        api("league_standings", "League table for a competition: points, wins, draws, losses and goal difference per team.",
            {"api_key": API_KEY, "league_id": S("League id."), "season": S("Season, e.g. 2024-25.")}, ["api_key", "league_id"],
            R(table=A(O("Row.", position=I("Rank."), team_id=S("Team."), points=I("Points.")), "Table."))),
        api("team_fixtures", "Upcoming and recent matches of a team with kickoff times and venues.",
            {"api_key": API_KEY, "team_id": S("Team id."), "next": I("Upcoming count.", default=5), "last": I("Past count.", default=0)},
            ["api_key", "team_id"], R(matches=A(O("Match.", match_id=S("Id."), start_time=S("Kick-off time, ISO 8601."), opponent=S("Opponent.")), "Matches."))),
        api("match_details", "Line-ups, goals, cards, substitutions and statistics of one match.",
            {"api_key": API_KEY, "match_id": S("Match id.")}, ["api_key", "match_id"],
            R(match_id=S("Id."), events=A(O("Event.", minute=I("Minute."), type=S("Goal, card..."), player=S("Player.")), "Events."))),
        api("player_stats", "Season statistics of a player: appearances, goals, assists, minutes.",
            {"api_key": API_KEY, "player_name": S("Player name."), "season": S("Season.")}, ["api_key", "player_name"],
            R(appearances=I("Games."), goals=I("Goals."), assists=I("Assists."))),
        api("head_to_head", "Past results between two teams.",
            {"api_key": API_KEY, "team_id": S("First team id."), "opponent_team_id": S("Second team id."), "limit": LIMIT},
            ["api_key", "team_id", "opponent_team_id"], R(matches=A(O("Match.", date=S("Date."), score=S("Score.")), "Meetings."))),
    ])

TOOLS = [MAPS, SPORTS]
